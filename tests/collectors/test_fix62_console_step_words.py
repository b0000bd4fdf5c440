"""Issue 11 (fix62): the collector console printed ``ready-control: failed`` (the live log line and the
summary table) for a campaign whose policy verdict is INCONCLUSIVE: the engine refused the READY control
probe (HTTP 401 from an API key the collector does not send, or vLLM's context-length 400), which the policy
does not credit (``engine-refused-probe``), so the gate is ``missing``, not failed. The console contradicted
the verdict it printed two lines below.

Now the console calls the collector's own record of a step a *step* in its own words (``did not pass``,
``skipped``), and the summary table shows each gate's status and reason as the policy judged it, the step
beside it. ``failed`` is printed for a gate only where the policy says so.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.cli.collect import _gate_rows, _print_summary
from ledger.collectors.campaign import STEP_WORDS, CampaignResult, GateOutcome, step_line, step_word

from .conftest import LEDGER

# A stand-in engine (standard library only): vLLM-like readiness (/health 200 once listening, /v1/models
# serves the campaign's name), and every POST refused as the real engines refuse it.
ENGINE = r"""
import argparse, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--refuse", choices=("401", "context"), required=True)
ap.add_argument("--model", required=True)  # the pinned path a real engine loads: named, not read
a = ap.parse_args()
CONTEXT = (
    "This model's maximum context length is 16 tokens. However, you requested 24 tokens (16 in the "
    "messages, 8 in the completion). Please reduce the length of the messages or completion."
)


class H(BaseHTTPRequestHandler):
    def _send(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        print(f'INFO:     127.0.0.1:50000 - "{self.command} {self.path} HTTP/1.1" {status}', flush=True)

    def do_GET(self):
        if self.path == "/health":
            return self._send(200, {})
        if self.path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": "fault-model", "object": "model"}]})
        return self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if a.refuse == "401":
            return self._send(401, {"error": {"message": "Invalid API key", "code": 401}})
        return self._send(400, {"error": {"message": CONTEXT, "type": "BadRequestError", "code": 400}})

    def log_message(self, *_a):
        pass


server = ThreadingHTTPServer(("127.0.0.1", a.port), H)
print(f"INFO:     Uvicorn running on http://127.0.0.1:{a.port}", file=sys.stderr, flush=True)
server.serve_forever()
"""

FAILED = re.compile(r"\bfailed\b")


def _campaign(tmp_path: Path, model_dir: Path, refuse: str) -> Path:
    engine = tmp_path / "refusing_engine.py"
    engine.write_text(ENGINE, encoding="utf-8")
    command = json.dumps(
        ["{python}", str(engine), "--port", "{port}", "--refuse", refuse, "--model", "{model}"]
    )
    p = tmp_path / "refused.toml"
    p.write_text(
        '[campaign]\nid = "refused"\nlease_seconds = 120\n\n'
        f'[model]\npath = "{model_dir}"\nname = "fault-model"\nserved_name = "fault-model"\n\n'
        f'[engine]\nkind = "vllm"\npython = "{sys.executable}"\ncommand = {command}\n'
        "lease_seconds = 30\ngrace_seconds = 3\nexit_wait_seconds = 3\n",
        encoding="utf-8",
    )
    return p


def _run(campaign: Path, home: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LEDGER, "collect", "run", str(campaign), "--home", str(home), *extra],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("refuse", ["401", "context"])
def test_a_refused_control_probe_is_never_printed_as_a_failed_gate(
    tmp_path: Path, tiny_model_dir: Path, home: Path, refuse: str
) -> None:
    r = _run(_campaign(tmp_path, tiny_model_dir, refuse), home)
    assert r.returncode == 1, r.stderr  # not qualified: the policy's word decides
    assert "policy verdict: INCONCLUSIVE" in r.stdout, r.stdout
    for line in (r.stdout + r.stderr).splitlines():
        if "ready-control" in line:
            assert not FAILED.search(line), line
    # the live line names the collector's step; the table the policy's gate status beside it
    assert "step 5 ready-control: did not pass" in r.stderr, r.stderr
    row = next(x for x in r.stdout.splitlines() if re.match(r"\W*5\W+ready-control\b", x))
    assert "missing" in row and "engine-refused-probe" in row and "did not pass" in row, row
    later = next(x for x in r.stdout.splitlines() if re.match(r"\W*6\W+structured-output\b", x))
    assert "not_authorized" in later and "skipped" in later, later
    line = next(x for x in r.stdout.splitlines() if x.startswith("collector gates:"))
    assert "the policy: ready-control missing" in line, line


def test_the_json_summary_carries_the_policys_gates(tmp_path: Path, tiny_model_dir: Path, home: Path) -> None:
    r = _run(_campaign(tmp_path, tiny_model_dir, "401"), home, "--json")
    out = json.loads(r.stdout)
    assert out["policy_verdict"] == "INCONCLUSIVE"
    assert out["policy_gates"]["ready-control"]["status"] == "missing"
    assert out["policy_gates"]["ready-control"]["evidence"] == []
    assert out["policy_gates"]["api-readiness"]["status"] == "passed"
    # the collector's own record is unchanged: its step did not pass
    assert {g["gate"]: g["status"] for g in out["gates"]}["ready-control"] == "failed"


def _result(policy: dict[str, str], *steps: tuple[str, str], verdict: str = "INCONCLUSIVE") -> CampaignResult:
    return CampaignResult(
        campaign="c",
        job_id="j",
        job_entry="a" * 64,
        state="failed",
        gates=[GateOutcome(gate=g, status=s, reason=f"{g} step reason") for g, s in steps],
        policy_verdict=verdict,
        policy_gates={
            n: {"status": s, "reason": f"{n} policy reason", "evidence": []} for n, s in policy.items()
        },
    )


def test_a_gate_the_policy_fails_is_printed_failed(capsys: pytest.CaptureFixture[str]) -> None:
    r = _result({"ready-control": "failed"}, ("ready-control", "failed"), verdict="NOT QUALIFIED — CONTROL")
    _print_summary(r)
    out = capsys.readouterr().out
    assert "ready-control policy reason" in out and "did not pass: ready-control step reason" in out
    line = next(x for x in out.splitlines() if x.startswith("collector gates:"))
    assert line.startswith("collector gates: ready-control failed first"), line
    assert re.search(r"ready-control\W+failed\W", out), out


@pytest.mark.parametrize("policy_status", ["missing", "not_authorized", "passed"])
def test_a_step_that_did_not_pass_takes_the_policys_word_for_its_gate(
    capsys: pytest.CaptureFixture[str], policy_status: str
) -> None:
    r = _result({"ready-control": policy_status}, ("ready-control", "failed"))
    assert _gate_rows(r)[0][2:5] == ("policy", "policy's reason", "collector step")
    _print_summary(r)
    out = capsys.readouterr().out
    assert not FAILED.search(out), out
    assert policy_status in out and "did not pass" in out
    line = next(x for x in out.splitlines() if x.startswith("collector gates:"))
    assert line.endswith(f"the policy: ready-control {policy_status}"), line


def test_a_policy_gate_without_a_step_and_a_step_without_a_policy_gate_are_both_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _print_summary(
        _result(
            {"model-pinned": "passed", "semantic": "missing"}, ("model-pinned", "passed"), ("extra", "failed")
        )
    )
    out = capsys.readouterr().out
    assert "semantic policy reason" in out  # the policy's gate the collector recorded no step for
    assert "no gate of the policy" in out and "not judged" in out  # a step no gate of the policy has
    line = next(x for x in out.splitlines() if x.startswith("collector gates:"))
    assert line.endswith("the policy has no gate extra"), line
    assert not FAILED.search(out), out


def test_without_the_policys_gates_the_table_names_collector_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    r = _result({}, ("ready-control", "failed"), ("benchmark", "not_authorized"))
    r.policy_verdict = None  # recorded to a server: the policy's verdict is not derived here
    headers, _rows = _gate_rows(r)
    assert headers[2] == "collector step"  # a terminal's table names the column a step, not a status
    _print_summary(r)
    out = capsys.readouterr().out
    assert "did not pass" in out and "skipped" in out and not FAILED.search(out)
    assert "policy verdict: run `ledger verdict" in out


def test_inconclusive_without_the_policys_gates_never_says_failed(capsys: pytest.CaptureFixture[str]) -> None:
    _print_summary(_result({}, ("ready-control", "failed")))
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("collector gates:"))
    assert line.startswith("collector gates: ready-control did not pass first"), line
    assert not FAILED.search(out), out


def test_step_words_cover_every_recorded_status_and_keep_an_unknown_one() -> None:
    from typing import get_args

    from ledger.entries import GateResult

    statuses = set(get_args(GateResult.model_fields["status"].annotation))
    assert set(STEP_WORDS) == statuses
    assert "failed" not in STEP_WORDS.values()
    assert step_word("exploded") == "exploded"  # never hidden behind another word
    assert (
        step_line(3, "api-readiness", "failed", "HTTP 401") == "step 3 api-readiness: did not pass — HTTP 401"
    )
    assert step_line(4, "benchmark", "not_run", None) == "step 4 benchmark: not run"
