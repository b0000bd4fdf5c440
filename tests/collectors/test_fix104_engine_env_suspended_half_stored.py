"""fix104 (audit 83): the engine's inherited settings, an engine suspended from outside, a half-stored job.

f10: llama-cpp-python's server reads its settings from the environment (any case, no prefix): a variable the
shell carried (INTERRUPT_REQUESTS=False, CHAT_FORMAT=llama-2) changed what was qualified and nothing
recorded it. The engine now inherits only what a process needs and the engine-relevant variables every launch
records; the rest of the shell stays behind.

f3: an engine suspended from outside (SIGSTOP) was judged hung (lease-expired, SIGKILL). The collector reads
the engine's process state before it stops it and records a stop from outside (``suspended-from-outside``,
class operator-stop).

f7: a store made unwritable mid-run left only the ``running`` job entry and no launch: the launch is recorded
with its logs by reference (``stored: false``) and the reason, and the job always ends.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ledger.collectors.campaign import CampaignRunner
from ledger.collectors.launch import EngineRun, LaunchSpec, launch_env, relevant_env
from ledger.collectors.lease_keeper import stopped_processes
from ledger.errors import StorageError

# --- f10: the engine's environment ---------------------------------------------------------------------


def _seen_env(tmp_path: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a launched engine actually saw (it writes its own ``os.environ`` to a file)."""
    out = tmp_path / "seen.txt"
    code = f"import json, os; open({str(out)!r}, 'w').write(json.dumps(dict(os.environ)))"
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, "-c", code],
        base_url="http://127.0.0.1:9",
        lease_seconds=10,
        env=env or {},
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    try:
        assert run.wait_exit(10)
    finally:
        run.stop("test")
    seen: dict[str, str] = json.loads(out.read_text())
    return seen


@pytest.mark.parametrize(
    "name", ["INTERRUPT_REQUESTS", "CHAT_FORMAT", "interrupt_requests", "N_CTX", "Model"]
)
def test_an_engine_setting_the_shell_carries_does_not_reach_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "False")
    assert name not in launch_env({})
    assert name not in _seen_env(tmp_path)


def test_an_engine_setting_the_campaign_states_reaches_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAT_FORMAT", "llama-2")
    seen = _seen_env(tmp_path, {"INTERRUPT_REQUESTS": "False", "CHAT_FORMAT": "chatml"})
    assert seen["INTERRUPT_REQUESTS"] == "False" and seen["CHAT_FORMAT"] == "chatml"


def test_what_a_process_needs_and_the_recorded_engine_variables_are_inherited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("LLAMA_ARG_N_PARALLEL", "3")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    seen = _seen_env(tmp_path)
    assert seen["PATH"] == os.environ["PATH"] and seen["LC_ALL"] == "C.UTF-8"
    assert seen["OMP_NUM_THREADS"] == "2" and seen["LLAMA_ARG_N_PARALLEL"] == "3"
    # … and the launch records every engine-relevant one it inherits (its payload's ``env``)
    recorded = relevant_env(os.environ)
    assert recorded["OMP_NUM_THREADS"] == "2" and recorded["LLAMA_ARG_N_PARALLEL"] == "3"


# --- f3: suspended from outside ----------------------------------------------------------------------


def _sleeper(tmp_path: Path) -> EngineRun:
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, "-c", "import time; time.sleep(60)"],
        base_url="http://127.0.0.1:9",
        lease_seconds=30,
        grace_seconds=1,
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    return run


def _wait_state(pid: int, stopped: bool) -> None:
    for _ in range(100):
        if bool(stopped_processes([pid])) == stopped:
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} never became {'stopped' if stopped else 'running'}")


def test_an_engine_suspended_from_outside_is_no_hang(tmp_path: Path) -> None:
    run = _sleeper(tmp_path)
    assert run.proc is not None
    os.kill(run.proc.pid, signal.SIGSTOP)
    _wait_state(run.proc.pid, True)
    run.stop("lease-expired")
    assert [sv["pid"] for sv in run.suspended] == [run.proc.pid]
    c = run.classification()
    assert c.signature == "suspended-from-outside" and c.failure_class == "operator-stop", c
    p = run.payload()
    assert p["failure_signature"] == "suspended-from-outside"
    assert "suspended from outside" in p["details"]["suspended_from_outside"]
    assert "suspended from outside" in (p["failure_detail"] or "")


def test_a_running_engine_that_does_not_answer_is_not_suspended(tmp_path: Path) -> None:
    run = _sleeper(tmp_path)
    run.lease_expired = True
    run.stop("lease-expired")
    assert run.suspended == []
    assert run.classification().signature != "suspended-from-outside"


def test_an_engine_stopped_then_continued_is_not_suspended(tmp_path: Path) -> None:
    run = _sleeper(tmp_path)
    assert run.proc is not None
    os.kill(run.proc.pid, signal.SIGSTOP)
    _wait_state(run.proc.pid, True)
    os.kill(run.proc.pid, signal.SIGCONT)
    _wait_state(run.proc.pid, False)
    run.stop("test")
    assert run.suspended == []


def test_a_process_that_cannot_be_read_is_not_counted_stopped() -> None:
    assert stopped_processes([2**22 + 12345]) == []


# --- f7: the launch's logs refused by the store ------------------------------------------------------


class _RefusingStore:
    def __init__(self, refuse_reference: bool = False) -> None:
        self.refuse_reference = refuse_reference

    def artifact(
        self, name: str, path: Path, *, media_type: str | None = None, by_reference: bool = False
    ) -> Any:
        if not by_reference or self.refuse_reference:
            raise StorageError(f"cannot store {name}: read-only")
        return {"name": name, "stored": False}


def _logs(tmp_path: Path) -> list[tuple[str, Path, int]]:
    out = []
    for name in ("stdout.log", "stderr.log"):
        (tmp_path / name).write_text("x\n")
        out.append((name, tmp_path / name, 0))
    return out


def test_a_launch_whose_logs_the_store_refuses_is_recorded_with_them_not_stored(tmp_path: Path) -> None:
    payload: dict[str, Any] = {"details": {}}
    me = SimpleNamespace(rec=_RefusingStore())
    arts = CampaignRunner._launch_logs(me, _logs(tmp_path), payload)  # type: ignore[arg-type]
    assert arts == [{"name": "stdout.log", "stored": False}, {"name": "stderr.log", "stored": False}]
    assert "read-only" in payload["details"]["logs_not_stored"]


def test_a_launch_whose_logs_cannot_even_be_referenced_says_so(tmp_path: Path) -> None:
    payload: dict[str, Any] = {"details": {}}
    me = SimpleNamespace(rec=_RefusingStore(refuse_reference=True))
    assert CampaignRunner._launch_logs(me, _logs(tmp_path), payload) == []  # type: ignore[arg-type]
    said = payload["details"]["logs_not_stored"]
    assert "stdout.log" in said and "stderr.log" in said


def test_a_launch_whose_logs_are_stored_says_nothing_of_it(tmp_path: Path) -> None:
    payload: dict[str, Any] = {"details": {}}

    class _Store:
        def artifact(self, name: str, path: Path, **_: Any) -> Any:
            return {"name": name}

    arts = CampaignRunner._launch_logs(SimpleNamespace(rec=_Store()), _logs(tmp_path), payload)  # type: ignore[arg-type]
    assert len(arts) == 2 and "logs_not_stored" not in payload["details"]
