"""Fix 130 (audit 91 f3): the collector's probe records llama-cpp-python's HTTP 500 "Invalid chat handler: X"
so that the one reader (``ledger.answers.refusal`` with the launch's command, ``launched_command``) calls
it the campaign's configuration where the command gives ``--chat_format X`` — and the engine's where not."""

from __future__ import annotations

import json
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.answers import REFUSAL_OPTION_VALUE, launched_command, refusal
from ledger.collectors.probe import probe_completion
from ledger.collectors.secrets import redact_command

PARAMS: dict[str, Any] = tomllib.loads(
    (Path(__file__).resolve().parents[2] / "policies" / "evidence-acceptance.toml").read_text()
)["params"]
MESSAGE = "Invalid chat handler: no-such-format (valid formats: ['llama-2', 'chatml'])"
COMMAND = [
    "/venv/bin/python",
    "-m",
    "llama_cpp.server",
    "--model",
    "/m.gguf",
    "--chat_format",
    "no-such-format",
]


class _Refusing(BaseHTTPRequestHandler):
    status = 500

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"message": MESSAGE, "type": "internal_server_error"}}).encode()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def engine() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_engine_refusing_the_commands_chat_format_is_read_as_the_campaigns(engine: str) -> None:
    payload = probe_completion(engine, model="tiny")
    assert payload["ok"] is False and payload["http_status"] == 500
    # the collector's command as the launch records it, and the policy's read of that record: one value
    recorded = {"engine": "llamacpp", "command": redact_command(COMMAND)}
    assert launched_command(recorded) == tuple(COMMAND)
    assert refusal(payload, PARAMS, command=launched_command(recorded)) == REFUSAL_OPTION_VALUE


def test_engine_refusing_a_chat_format_the_command_does_not_give_is_a_failure(engine: str) -> None:
    payload = probe_completion(engine, model="tiny")
    assert refusal(payload, PARAMS, command=[*COMMAND[:-1], "chatml"]) is None
    assert refusal(payload, PARAMS, command=None) is None


def test_the_same_words_in_a_400_are_not_the_option_value_refusal(engine: str) -> None:
    _Refusing.status = 400
    try:
        payload = probe_completion(engine, model="tiny")
    finally:
        _Refusing.status = 500
    assert payload["http_status"] == 400
    assert refusal(payload, PARAMS, command=COMMAND) is None


def test_a_probe_records_the_engines_whole_chat_handler_error() -> None:
    """Regression (fix 133's note): the probe kept 300 characters of an engine's error, so llama-cpp-python's
    407-character "Invalid chat handler: X (valid formats: [...])" was always cut and its valid list could
    not be judged whole. The probe keeps up to ``_ERROR_LIMIT`` characters; longer errors are still cut."""
    from ledger.collectors.probe import _ERROR_LIMIT, _error_text

    formats = ", ".join(repr(f"format-{i:02d}") for i in range(27))
    message = f"Invalid chat handler: no-such-format (valid formats: [{formats}])"
    assert 400 < len(message) < _ERROR_LIMIT
    r = httpx.Response(500, json={"error": {"message": message}})
    assert _error_text(r) == message
    long = httpx.Response(500, json={"error": {"message": "x" * (_ERROR_LIMIT + 50)}})
    assert len(_error_text(long)) == _ERROR_LIMIT
