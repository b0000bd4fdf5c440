"""Neighbours of the collect-run rules an audit of them found (audit 16), each named after the failure.

- A secret the engine echoed in an error answer (its HF_TOKEN in a 500 body) was signed, unredacted, into
  the probe (`error`, `details.body`), the gate's reason and the job's, and printed.
- A helper of the engine that follows its parent out on its own (within milliseconds of the stop) was
  recorded as a survivor, and a healthy engine failed runtime-stability on timing alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from typing import Any

from ledger.collectors.campaign import CampaignRunner
from ledger.collectors.lease_keeper import LAUNCH_MARK, marked_processes, stop_marked
from ledger.collectors.secrets import REDACTED, Redactor

TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"


class _Engine:
    def __init__(self, known: set[str]) -> None:
        self.known = known

    def redactor(self) -> Redactor:
        return Redactor(self.known)


def _runner(engine: Any = None) -> CampaignRunner:
    runner = CampaignRunner.__new__(CampaignRunner)
    runner.engine = engine
    return runner


def test_a_secret_the_engine_echoed_in_an_error_answer_is_not_signed() -> None:
    payload = {
        "check": "completion",
        "ok": False,
        "http_status": 500,
        "error": f"HTTP 500: bad credentials HF_TOKEN={TOKEN}",
        "text": None,
        "details": {"body": f'{{"error": {{"message": "token {TOKEN} rejected"}}}}', "failures": [TOKEN]},
    }
    out = _runner()._redacted(payload)
    assert TOKEN not in repr(out)
    assert REDACTED in out["error"] and REDACTED in out["details"]["body"]
    assert out["details"]["failures"] == [REDACTED]
    # what the record says otherwise is kept as it is
    assert {k: out[k] for k in ("check", "ok", "http_status", "text")} == {
        "check": "completion",
        "ok": False,
        "http_status": 500,
        "text": None,
    }


def test_a_models_answer_keeps_its_text_but_not_the_engines_own_secrets() -> None:
    """A model's answer is judged as it stands (a secret-shaped word in it is the model's), except a secret
    of the engine's own environment, which it must not carry into the ledger."""
    engine = _Engine({"s3cr3t-value-42"})
    out = _runner(engine)._redacted(
        {"text": "READY password=hunter2 s3cr3t-value-42", "reason": "got s3cr3t-value-42"}
    )
    assert out["text"] == f"READY password=hunter2 {REDACTED}"
    assert out["reason"] == f"got {REDACTED}"


def _marked(seconds: float, mark: str) -> subprocess.Popen[bytes]:
    """A process of its own session that sleeps ``seconds``, marked as an engine's, once it is seen."""
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep({seconds})"],
        env={**os.environ, LAUNCH_MARK: mark},
        start_new_session=True,
    )
    deadline = time.monotonic() + 5
    while not marked_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def test_a_helper_that_exits_on_its_own_after_the_stop_is_no_survivor() -> None:
    mark = uuid.uuid4().hex
    helper = _marked(0.3, mark)
    try:
        assert marked_processes(mark), "the helper runs, marked"
        assert stop_marked(mark, grace=3.0) == []
    finally:
        helper.kill()
        helper.wait()


def test_a_helper_still_running_after_the_grace_is_a_survivor_and_stopped() -> None:
    mark = uuid.uuid4().hex
    helper = _marked(60, mark)
    try:
        found = stop_marked(mark, grace=0.5)
        assert [p["pid"] for p in found] == [helper.pid]
        helper.wait(timeout=5)
        assert marked_processes(mark) == []
    finally:
        helper.kill()
        helper.wait()
