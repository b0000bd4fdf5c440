"""Fix 158 (issue 11, audit 102 f2): an engine held from outside, then let go, is no slow engine.

An engine SIGSTOPped from outside for longer than the request timeout, and SIGCONTed before the harness's
liveness check answered, got NOT QUALIFIED — PERFORMANCE: its requests timed out, the check then found it
answering, and the timeouts read as the engine's slowness. Both harnesses now look at the state of the
engine's processes (``benchmark.EngineHold``, ``lease_keeper.stopped_processes``) while they wait on it —
every ``STOP_POLL_S`` while a request is in flight, and at each request that timed out — and a request that
timed out in a hold (the benchmark: any hold seen) stops the run as an operator's stop would (outcome
``operator-stop``, the reason naming the hold, the hold kept in ``bounds.held_from_outside``): the policy's
``operator-stopped``, INCONCLUSIVE.
An engine that is slow with nobody holding it keeps its timeouts (NOT QUALIFIED — PERFORMANCE as before).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import ledger.collectors.benchmark as benchmark_module
import ledger.collectors.campaign as campaign_mod
import ledger.collectors.semantic as semantic_module
from ledger.collectors.benchmark import (
    HELD_FROM_OUTSIDE,
    BenchmarkSpec,
    EngineHold,
    benchmark_gate_payload,
    run_benchmark,
)
from ledger.collectors.corpus import corpus_digest
from ledger.collectors.semantic import SemanticSpec, run_semantic
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger
from tests.engines.stub_openai import free_port

from .conftest import entries_of
from .test_harness_gates import (
    corpus,  # noqa: F401  (the fixture)
    gate,
    policy_with,
    run,
    stub_campaign,
)

STUB = Path(__file__).resolve().parents[1] / "engines" / "stub_openai.py"
HELD = HELD_FROM_OUTSIDE.split(" (", 1)[0]  # "the engine was suspended from outside"
COMMIT = "c" * 40  # the commit the collector is taken to run at (a dirty test checkout binds none)


# --- helpers ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def stub_process(*args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The stub engine as a process of its own (so that it can be stopped), until the block ends."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(STUB), "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "the stub did not start"
            time.sleep(0.05)
        yield proc, base
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Freeze(threading.Thread):
    """``after_s`` after it starts, SIGSTOP ``pid`` from outside; ``hold_s`` later SIGCONT it — an operator's
    ``kill -STOP`` then ``kill -CONT``, the engine let go before the harness asks it whether it answers."""

    def __init__(self, pid: int, after_s: float, hold_s: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.after_s, self.hold_s = pid, after_s, hold_s
        self.stopped_at: float | None = None
        self.continued_at: float | None = None

    def run(self) -> None:
        time.sleep(self.after_s)
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped_at = time.monotonic()
        time.sleep(self.hold_s)
        os.kill(self.pid, signal.SIGCONT)
        self.continued_at = time.monotonic()


def _bench_corpus(tmp_path: Path, n: int = 4) -> Path:
    path = tmp_path / "bench.jsonl"
    rows = [
        {"id": f"p{i:02d}", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 4}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _bench(tmp_path: Path, **kw: Any) -> BenchmarkSpec:
    path = _bench_corpus(tmp_path)
    base: dict[str, Any] = {
        "concurrency": (1, 4),
        "requests_per_level": 40,
        "repetitions": 1,
        "saturation": "report",
        "request_timeout_s": 1.0,
    }
    base.update(kw)
    return BenchmarkSpec(path, corpus_digest(path), **base)


def _semantic(tmp_path: Path) -> SemanticSpec:
    path = tmp_path / "semantic.jsonl"
    rows = [
        {
            "id": f"s{i}",
            "messages": [{"role": "user", "content": f"question {i}"}],
            "checks": [{"type": "contains", "value": "tok0"}],
        }
        for i in range(40)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return SemanticSpec(path, corpus_digest(path), request_timeout_s=1.0)


@pytest.fixture
def short_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    """/health and /v1/models get 5 s (10 s in use): the hold (2.5 s) ends while they wait (the audit's)."""
    monkeypatch.setattr(benchmark_module, "LIVENESS_TIMEOUT_S", 5.0)


# --- the harnesses ----------------------------------------------------------------------------------------


def test_benchmark_engine_held_past_the_timeout_then_let_go_stops_the_run_as_held_from_outside(
    tmp_path: Path, short_liveness: None
) -> None:
    with stub_process("--ttft-ms", "20") as (proc, base):
        freeze = Freeze(proc.pid, after_s=0.6, hold_s=2.5)
        freeze.start()
        result = run_benchmark(
            _bench(tmp_path), base, out_dir=tmp_path / "o", engine_processes=lambda: [proc.pid]
        )
        freeze.join()
    assert result.outcome == "operator-stop" and result.aggregate is None and not result.valid
    assert result.stopped is not None and result.stopped.startswith(HELD), result.stopped
    assert f"pid {proc.pid} (" in result.stopped and "during c1 repetition 0" in result.stopped
    # seen within STOP_POLL_S of the stop: the request in flight is cut, none timed out, none counted
    # against the engine
    assert not any(r.timed_out for r in result.records), [r.error for r in result.records if r.error]
    assert [r.error for r in result.records if r.error and not r.error.startswith("stopped:")] == []
    [held] = result.held
    assert held["processes"][0]["pid"] == proc.pid and held["seen_at"] and held["not_held_at"]
    summary = json.loads((tmp_path / "o" / "benchmark-result.json").read_text())
    assert summary["held_from_outside"] == result.held and summary["outcome"] == "operator-stop"
    payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}})
    assert payload["status"] == "failed" and payload["bounds"]["outcome"] == "operator-stop"
    assert HELD in str(payload["reason"])


def test_benchmark_timeout_in_a_hold_the_poll_did_not_see_is_the_holds(
    tmp_path: Path, short_liveness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look at each request that timed out: with no look while requests are in flight (the run's stop
    check made the operator's alone), the request that timed out in the hold still finds it held — the
    timeout is the hold's, recorded so, the engine never asked whether it hangs, and the run stops as held."""
    monkeypatch.setattr(EngineHold, "stop_check", lambda self, should_stop: should_stop)
    with stub_process("--ttft-ms", "20") as (proc, base):
        freeze = Freeze(proc.pid, after_s=0.6, hold_s=2.5)
        freeze.start()
        result = run_benchmark(
            _bench(tmp_path), base, out_dir=tmp_path / "o", engine_processes=lambda: [proc.pid]
        )
        freeze.join()
    assert result.outcome == "operator-stop", (result.outcome, result.stopped)
    # the request that timed out in the hold is the hold's: the run cut it (fix 166), no timeout of the engine
    held = [r for r in result.records if HELD in (r.error or "")]
    assert held and all(r.error.startswith("stopped:") and not r.timed_out for r in held), [
        r.error for r in held
    ]
    assert "timed out in the hold" in " ".join(r.error or "" for r in held)
    assert result.engine_checks == [] and len(result.held) == 1


def test_benchmark_a_hold_shorter_than_the_timeout_stops_the_run_too(tmp_path: Path) -> None:
    """Every latency measured while the engine was held is the hold's: the benchmark stops at the first hold
    it sees, whether or not a request timed out in it."""
    with stub_process("--ttft-ms", "20") as (proc, base):
        freeze = Freeze(proc.pid, after_s=0.6, hold_s=0.5)
        freeze.start()
        spec = _bench(tmp_path, request_timeout_s=10.0)
        result = run_benchmark(spec, base, out_dir=tmp_path / "o", engine_processes=lambda: [proc.pid])
        freeze.join()
    assert result.outcome == "operator-stop" and (result.stopped or "").startswith(HELD)
    assert not any(r.timed_out for r in result.records)


def test_benchmark_without_the_engines_processes_judges_as_before(
    tmp_path: Path, short_liveness: None
) -> None:
    """The neighbour (and the audit's failure): a run given no engine processes (a standalone ``ledger
    harness`` run against an endpoint) cannot look; the held engine's timeouts stay request errors."""
    with stub_process("--ttft-ms", "20") as (proc, base):
        freeze = Freeze(proc.pid, after_s=0.6, hold_s=2.5)
        freeze.start()
        result = run_benchmark(_bench(tmp_path), base, out_dir=tmp_path / "o")
        freeze.join()
    assert result.outcome == "completed" and result.held == []
    assert any(r.timed_out for r in result.records)
    assert [c["verdict"] for c in result.engine_checks] == ["answers"]  # let go before it was asked


def test_benchmark_a_slow_engine_nobody_holds_keeps_its_timeouts(tmp_path: Path) -> None:
    """The neighbour: every request slower than the timeout, nobody holding the engine — its timeouts stay
    request errors with its processes watched (an invalid run, the gate failed: PERFORMANCE)."""
    with stub_process("--ttft-ms", "1300") as (proc, base):
        spec = _bench(tmp_path, concurrency=(1,), requests_per_level=2)
        result = run_benchmark(spec, base, out_dir=tmp_path / "o", engine_processes=lambda: [proc.pid])
    assert result.outcome == "completed" and result.held == []
    assert all(r.timed_out for r in result.records) and len(result.records) == 2
    assert {c["verdict"] for c in result.engine_checks} == {"answers"}  # asked at each: slow, not held
    payload = benchmark_gate_payload(result, {"error_rate": {"max": 0}})
    assert payload["status"] == "failed" and payload["bounds"]["outcome"] == "completed"
    assert HELD not in str(payload["reason"])


def test_semantic_engine_held_then_let_go_stops_the_run_as_held_from_outside(
    tmp_path: Path, short_liveness: None
) -> None:
    with stub_process("--ttft-ms", "40") as (proc, base):
        freeze = Freeze(proc.pid, after_s=0.6, hold_s=2.5)
        freeze.start()
        result = run_semantic(
            _semantic(tmp_path), base, out_dir=tmp_path / "s", engine_processes=lambda: [proc.pid]
        )
        freeze.join()
    assert result.outcome == "operator-stop" and result.score is None
    assert result.stopped is not None and result.stopped.startswith(HELD), result.stopped
    assert all(i.error is None for i in result.items) and result.timed_out == 0
    assert len(result.held) == 1 and result.summary()["held_from_outside"] == result.held


def test_semantic_a_hold_no_request_timed_out_in_changes_no_answer(tmp_path: Path) -> None:
    """A hold shorter than the request timeout changes no answer: the semantic run goes on and is scored,
    the hold kept in its result."""
    with stub_process("--ttft-ms", "40") as (proc, base):
        freeze = Freeze(proc.pid, after_s=0.6, hold_s=0.5)
        freeze.start()
        spec = _semantic(tmp_path)
        spec = SemanticSpec(spec.corpus, spec.corpus_digest, request_timeout_s=10.0)
        result = run_semantic(spec, base, out_dir=tmp_path / "s", engine_processes=lambda: [proc.pid])
        freeze.join()
    assert result.outcome == "completed" and result.score == 1.0, result.stopped
    assert len(result.held) == 1 and result.held[0]["processes"][0]["pid"] == proc.pid


def test_semantic_without_the_engines_processes_judges_as_before(
    tmp_path: Path, short_liveness: None
) -> None:
    with stub_process("--ttft-ms", "40") as (proc, base):
        freeze = Freeze(proc.pid, after_s=0.6, hold_s=2.5)
        freeze.start()
        result = run_semantic(_semantic(tmp_path), base, out_dir=tmp_path / "s")
        freeze.join()
    assert result.outcome == "completed" and result.held == []
    assert result.timed_out == 1 and [i.passed for i in result.items].count(False) == 1


# --- EngineHold -------------------------------------------------------------------------------------------


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def _until_state(pid: int, states: str) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in states:
                return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never reached state {states}")


def test_hold_names_the_processes_held_and_keeps_each_hold_once(sleeper: subprocess.Popen[bytes]) -> None:
    hold = EngineHold(lambda: [sleeper.pid])
    assert hold.check() is None and hold.held == []
    os.kill(sleeper.pid, signal.SIGSTOP)
    _until_state(sleeper.pid, "Tt")
    why = hold.check()
    assert why is not None and why.startswith(HELD) and f"pid {sleeper.pid} (" in why
    assert hold.check() == why and len(hold.held) == 1  # the same hold, seen twice: kept once
    os.kill(sleeper.pid, signal.SIGCONT)
    _until_state(sleeper.pid, "SR")
    assert hold.check() is None
    os.kill(sleeper.pid, signal.SIGSTOP)
    _until_state(sleeper.pid, "Tt")
    assert hold.check() is not None and len(hold.held) == 2  # a second hold
    first = hold.held[0]
    assert first["not_held_at"] is not None and first["not_held_at"] <= first["seen_at"]


def test_hold_reads_the_engines_processes_again_before_it_blames_a_listed_pid(
    sleeper: subprocess.Popen[bytes],
) -> None:
    """A pid listed before and no longer the engine's (ended, its number reused) is not the engine held."""
    listed = [[sleeper.pid], []]
    hold = EngineHold(lambda: listed.pop(0) if len(listed) > 1 else listed[0])
    assert hold.check() is None  # lists [sleeper]
    os.kill(sleeper.pid, signal.SIGSTOP)
    _until_state(sleeper.pid, "Tt")
    assert hold.check() is None and hold.held == []  # read again: not the engine's now


@pytest.mark.parametrize("processes", [list, lambda: [2**22 + 7], lambda: [os.getpid()]])
def test_hold_of_no_process_gone_or_running_is_none(processes: Any) -> None:
    assert EngineHold(processes).check() is None


def test_stop_check_asks_the_operator_first_and_is_the_operators_alone_without_processes(
    sleeper: subprocess.Popen[bytes],
) -> None:
    def operator() -> str | None:
        return "stopped by the operator (SIGINT)"

    assert EngineHold(None).stop_check(None) is None
    assert EngineHold(None).stop_check(operator) is operator
    assert EngineHold(None).check() is None
    hold = EngineHold(lambda: [sleeper.pid])
    os.kill(sleeper.pid, signal.SIGSTOP)
    _until_state(sleeper.pid, "Tt")
    check = hold.stop_check(operator)
    assert check is not None and check() == "stopped by the operator (SIGINT)"
    alone = hold.stop_check(None)
    assert alone is not None and (alone() or "").startswith(HELD)


# --- the campaign and the verdict ---------------------------------------------------------------------------


def _review_and_accept(ledger: Ledger, *entries: str) -> None:
    ledger.new_key("reviewer", ["reviewer"])
    ledger.new_key("operator", ["operator"])
    for eid in entries:
        subject = dict(ledger.get(eid).statement.subject)
        ledger.record(
            "review", subject, {"result": "PASS", "commit": COMMIT}, key="reviewer", refs=[("reviews", eid)]
        )
        ledger.record(
            "acceptance",
            subject,
            {"decision": "accepted", "reason": "ok"},
            key="operator",
            refs=[("subject", eid)],
        )


def _held_during(
    monkeypatch: pytest.MonkeyPatch, name: str, module: Any, freezes: list[Freeze], after_s: float
) -> None:
    """``name`` (run_benchmark / run_semantic) as the campaign calls it, the engine held from outside
    ``after_s`` into the run for 3 s (longer than the request timeout), then let go. The harness is given
    the engine's processes (``EngineRun.engine_pids``) where the campaign does not give them itself."""
    real = getattr(module, name)

    def held(*a: Any, **k: Any) -> Any:
        engine = k["engine_alive"].__self__  # the EngineRun the campaign measures
        k.setdefault("engine_processes", engine.engine_pids)
        freeze = Freeze(engine.proc.pid, after_s=after_s, hold_s=3.0)
        freezes.append(freeze)
        freeze.start()
        try:
            return real(*a, **k)
        finally:
            freeze.join()

    monkeypatch.setattr(campaign_mod, name, held)


@pytest.mark.parametrize("harness", ["benchmark", "semantic"])
def test_campaign_engine_held_then_let_go_is_inconclusive_not_a_failure_of_the_engine(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    harness: str,
) -> None:
    """The audit's run: before the fix the benchmark's was NOT QUALIFIED — PERFORMANCE (one request timed
    out in the hold, error rate above 0), the semantic run's a failed item."""
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: (COMMIT, "test"))
    freezes: list[Freeze] = []
    module = benchmark_module if harness == "benchmark" else semantic_module
    # 0.6 s into the benchmark's 576 requests; 0.1 s into the semantic run's 2 items (0.15 s each)
    _held_during(monkeypatch, f"run_{harness}", module, freezes, 0.6 if harness == "benchmark" else 0.1)
    policy = policy_with(tmp_path, corpus[1])
    bench = "levels = [1, 4, 32]\nrequests = 96\nrepetitions = 2\nrequest_timeout_seconds = 2"
    # a slower stub: the run is still going when the hold comes
    c = stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=("--ttft-ms", "150"), benchmark=bench)
    text = c.read_text()  # the semantic run's requests time out in the hold (3 s) too
    c.write_text(
        text.replace(f'digest = "{corpus[1]}"', f'digest = "{corpus[1]}"\nrequest_timeout_seconds = 1')
    )
    result = run(c, recorder, tmp_path, policy)
    assert [f.continued_at is not None for f in freezes] == [True]
    g = next(g for g in result.gates if g.gate == harness)
    assert g.status == "failed" and HELD in (g.reason or ""), g.reason
    payload = gate(ledger, harness)["payload"]
    assert payload["bounds"]["outcome"] == "operator-stop", payload["bounds"]
    [held] = payload["bounds"]["held_from_outside"]
    assert held["processes"][0]["pid"] == freezes[0].pid and held["seen_at"]
    launch = entries_of(ledger, "engine.launch")[-1]["payload"]
    assert launch.get("failure_signature") is None  # let go: the launch ended as the collector stopped it
    _review_and_accept(ledger, *(gate(ledger, name)["id"] for name in ("semantic", "benchmark")))
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    [judged] = [x for x in v["gates"] if x["name"] == harness]
    assert judged["status"] == "missing" and "operator-stopped" in judged["reason"], judged
    [rejected] = [r for r in v["rejected"] if r["rule"] == "operator-stopped"]
    assert rejected["entry"] == gate(ledger, harness)["id"]


def test_campaign_engine_held_and_never_let_go_stays_the_launchs_hold(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The neighbour: an engine held and never let go (the stub stops itself, as ``kill -STOP`` would) — the
    run stops at the hold, and the collector's stop still finds the engine held and records the launch's
    ``suspended-from-outside``, as before."""
    monkeypatch.setattr(campaign_mod, "code_commit", lambda where=None: (COMMIT, "test"))
    real = benchmark_module.run_benchmark

    def given_processes(*a: Any, **k: Any) -> Any:
        k.setdefault("engine_processes", k["engine_alive"].__self__.engine_pids)
        return real(*a, **k)

    monkeypatch.setattr(campaign_mod, "run_benchmark", given_processes)
    policy = policy_with(tmp_path, corpus[1])
    bench = "levels = [1, 4, 32]\nrequests = 96\nrepetitions = 2\nrequest_timeout_seconds = 2"
    c = stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=("--stop-after", "64"), benchmark=bench)
    # the /health the collector asks a held engine before its stop waits as long as a harness request
    # (120 s for the semantic run's by default): 1 s here
    c.write_text(
        c.read_text().replace(
            f'digest = "{corpus[1]}"', f'digest = "{corpus[1]}"\nrequest_timeout_seconds = 1'
        )
    )
    result = run(c, recorder, tmp_path, policy)
    b = result.gates[-1]
    assert (b.gate, b.status) == ("benchmark", "failed") and HELD in (b.reason or ""), b.reason
    payload = gate(ledger, "benchmark")["payload"]
    assert payload["bounds"]["outcome"] == "operator-stop" and payload["counts"]["timed_out"] == 0
    launch = entries_of(ledger, "engine.launch")[-1]["payload"]
    assert launch.get("failure_signature") == "suspended-from-outside", launch
    _review_and_accept(ledger, *(gate(ledger, name)["id"] for name in ("semantic", "benchmark")))
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert [r["rule"] for r in v["rejected"] if r["entry"] == gate(ledger, "benchmark")["id"]] == [
        "operator-stopped"
    ], v["rejected"]
