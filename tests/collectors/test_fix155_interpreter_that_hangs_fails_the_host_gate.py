"""Fix 155 (audit 102 f3, issue 11): an engine interpreter that cannot be queried fails the host gate.

A campaign's ``[engine] env`` put a ``PYTHONPATH`` whose ``sitecustomize.py`` sleeps forever in front of the
engine's interpreter. The version query timed out (the job started without ``backend_version``), the host
gate re-raised the stored error — ``error[collector]: cannot query interpreter … Command '[…, '-c',
'\\nimport importlib.metadata …']' timed out after 60 seconds``, the whole embedded script repeated in every
step line — and ``collect run`` exited 2 after recording 12 entries; the verdict was INCONCLUSIVE with
host-prerequisites passed and the reason put on model-pinned ("no accepted model pin").

Now the interpreter that cannot be queried fails the host gate as a missing interpreter does: the step
``host-prerequisites`` fails naming the hang (one short line, no script), no ``env.snapshot`` is recorded,
the later steps are not authorized, the collector's word is NOT QUALIFIED — PREREQUISITES and the run
returns its result (no error). The policy's host-prerequisites gate judged host probes only and passed
without the job's ``env.snapshot`` (a strict xfail here, reported); since fix 157 it reads the job's env
snapshot and the collector's host-prerequisites result too: the failed host step fails the gate, NOT
QUALIFIED — PREREQUISITES with the collector's reason.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors import host as host_mod
from ledger.collectors.campaign import CampaignRunner, load_campaign, policy_verdict
from ledger.collectors.host import engine_env
from ledger.collectors.launch import launch_env
from ledger.errors import CollectorError
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401 (fixture)

PREREQ = "NOT QUALIFIED — PREREQUISITES"


def _site(tmp_path: Path, body: str, name: str = "site") -> Path:
    """A folder that, on PYTHONPATH, runs ``body`` as the interpreter starts (its sitecustomize.py)."""
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "sitecustomize.py").write_text(body)
    return d


@pytest.fixture
def quick_query(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(host_mod, "QUERY_TIMEOUT_S", 2.0)
    return 2.0


# --- the interpreter query's own message -------------------------------------------------------------


def test_an_interpreter_that_hangs_at_start_is_named_in_one_short_line(
    tmp_path: Path, quick_query: float
) -> None:
    hang = _site(tmp_path, "import time\ntime.sleep(100000)\n")
    with pytest.raises(CollectorError) as got:
        engine_env(sys.executable, launch_env({"PYTHONPATH": str(hang)}))
    said = got.value.message
    assert f"cannot query interpreter {sys.executable}: it did not answer within 2 s" in said
    assert "hangs as it starts" in said and "sitecustomize.py" in said
    # the exception's own text repeated the whole query script
    assert "importlib" not in said and "timed out after" not in said and "\n" not in said
    assert len(said) < 400


def test_an_interpreter_that_exits_with_an_error_at_start_says_its_status(tmp_path: Path) -> None:
    failing = _site(tmp_path, "import os, sys\nsys.stderr.write('broken site\\n')\nos._exit(3)\n")
    with pytest.raises(CollectorError, match=r"it exited with status 3: broken site$"):
        engine_env(sys.executable, launch_env({"PYTHONPATH": str(failing)}))


def test_an_interpreter_whose_start_raises_says_the_error_in_one_line(tmp_path: Path) -> None:
    raising = _site(tmp_path, "raise SystemExit(3)\n")
    with pytest.raises(CollectorError) as got:
        engine_env(sys.executable, launch_env({"PYTHONPATH": str(raising)}))
    # (the status is the interpreter's: a SystemExit while site runs ends it as a startup error)
    assert re.search(r"it exited with status \d+: SystemExit: 3$", got.value.message), got.value.message
    assert "\n" not in got.value.message


def test_an_interpreter_that_prints_before_its_answer_says_it_answered_no_json(tmp_path: Path) -> None:
    chatty = _site(tmp_path, "print('hello from site')\n")
    with pytest.raises(CollectorError, match=r"its answer is not the JSON object the query prints"):
        engine_env(sys.executable, launch_env({"PYTHONPATH": str(chatty)}))


def test_an_interpreter_that_answers_is_read_as_before(tmp_path: Path) -> None:
    quiet = _site(tmp_path, "x = 1\n")
    info = engine_env(sys.executable, launch_env({"PYTHONPATH": str(quiet)}))
    assert info.payload["interpreter"] == sys.executable and info.payload["python"]
    assert info.payload["env"].get("PYTHONPATH") == str(quiet)


# --- the campaign's host gate ------------------------------------------------------------------------


def _with_engine_env(path: Path, env: str) -> Path:
    text = path.read_text()
    marker = 'kind = "generic"\n'
    assert text.count(marker) == 1
    path.write_text(text.replace(marker, marker + f"env = {{ PYTHONPATH = {env!r} }}\n".replace("'", '"')))
    return path


def _run(path: Path, recorder: LocalRecorder, tmp_path: Path, policy: Any) -> tuple[CampaignRunner, Any]:
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False, policy=policy
    )
    return runner, runner.run()


def _assert_host_gate_failed(ledger: Ledger, result: Any, why: str) -> None:
    statuses = [(g.gate, g.status) for g in result.gates]
    assert statuses[0] == ("host-prerequisites", "failed"), statuses
    assert all(s == "not_authorized" for _, s in statuses[1:]), statuses
    assert why in (result.gates[0].reason or "")
    assert result.verdict_hint == PREREQ
    assert entries_of(ledger, "env.snapshot") == [] and entries_of(ledger, "engine.launch") == []
    (end,) = [j for j in entries_of(ledger, "job") if j["payload"]["state"] != "running"]
    assert end["payload"]["state"] == "failed"
    assert end["payload"]["reason"].startswith("gate host-prerequisites failed: ")


def test_an_engine_interpreter_that_hangs_at_start_fails_the_host_gate(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    quick_query: float,
) -> None:
    hang = _site(tmp_path, "import time\ntime.sleep(100000)\n", "hang")
    path = _with_engine_env(stub_campaign(tmp_path, tiny_model_dir, corpus), str(hang))
    policy = policy_with(tmp_path, corpus[1])
    _, result = _run(path, recorder, tmp_path, policy)  # no error: the failure is the gate's
    _assert_host_gate_failed(ledger, result, "it did not answer within 2 s")
    reason = result.gates[0].reason or ""
    assert "the engine's interpreter cannot be read under the environment its engine runs under" in reason
    assert "importlib" not in reason and len(reason) < 500
    (gr,) = [g for g in entries_of(ledger, "gate.result") if g["payload"]["gate"] == "host-prerequisites"]
    assert gr["payload"]["status"] == "failed" and "it did not answer within 2 s" in gr["payload"]["reason"]
    # the policy's host gate reads the collector's failed host result: it fails with the collector's reason
    # (fix 157; before, the result was left unjudged and the verdict INCONCLUSIVE)
    v = policy_verdict(recorder, {"campaign": "harness"}, policy)
    assert v is not None and v["verdict"] == PREREQ, v["verdict"]
    (host,) = [g for g in v["gates"] if g["name"] == "host-prerequisites"]
    assert host["status"] == "failed" and "it did not answer within 2 s" in host["reason"], host
    assert gr["id"] in host["evidence"]
    assert not any(u.get("gate") == "host-prerequisites" for u in v["unjudged"]), v["unjudged"]


def test_an_engine_interpreter_that_is_missing_fails_the_host_gate_the_same_way(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    path = stub_campaign(tmp_path, tiny_model_dir, corpus)
    path.write_text(
        path.read_text().replace(f'python = "{sys.executable}"', 'python = "/nonexistent/python3"', 1)
    )
    _, result = _run(path, recorder, tmp_path, policy_with(tmp_path, corpus[1]))
    _assert_host_gate_failed(ledger, result, "engine interpreter /nonexistent/python3 not found")


def test_an_engine_interpreter_that_exits_at_start_fails_the_host_gate(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    failing = _site(tmp_path, "raise SystemExit(3)\n", "exits")
    path = _with_engine_env(stub_campaign(tmp_path, tiny_model_dir, corpus), str(failing))
    _, result = _run(path, recorder, tmp_path, policy_with(tmp_path, corpus[1]))
    _assert_host_gate_failed(ledger, result, ": SystemExit: 3")
    assert "it exited with status" in (result.gates[0].reason or "")


def test_an_engine_interpreter_that_answers_records_its_env_snapshot_and_passes(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """The passing neighbour, at the gate itself (no engine launched): the snapshot is read under the
    engine's environment and recorded beside the host probe."""
    quiet = _site(tmp_path, "x = 1\n", "quiet")
    path = _with_engine_env(stub_campaign(tmp_path, tiny_model_dir, corpus), str(quiet))
    runner = CampaignRunner(
        load_campaign(path),
        recorder,
        work_dir=tmp_path / "work",
        handle_signals=False,
        policy=policy_with(tmp_path, corpus[1]),
    )
    status, why, evidence, _ = runner._gate_host()  # the runner skipped its preflight: read now
    assert (status, why) == ("passed", None) and len(evidence) == 2
    (snap,) = entries_of(ledger, "env.snapshot")
    assert snap["payload"]["env"].get("PYTHONPATH") == str(quiet)


def test_host_prerequisites_never_passes_without_the_jobs_env_snapshot(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
    quick_query: float,
) -> None:
    hang = _site(tmp_path, "import time\ntime.sleep(100000)\n", "hang")
    path = _with_engine_env(stub_campaign(tmp_path, tiny_model_dir, corpus), str(hang))
    policy = policy_with(tmp_path, corpus[1])
    _run(path, recorder, tmp_path, policy)
    assert entries_of(ledger, "env.snapshot") == [] and entries_of(ledger, "host.probe") != []
    v = policy_verdict(recorder, {"campaign": "harness"}, policy)
    assert v is not None
    (host,) = [g for g in v["gates"] if g["name"] == "host-prerequisites"]
    assert host["status"] != "passed", host
    # … and it is the collector's failed host step that decides it (fix 157), not a missing snapshot alone
    assert host["status"] == "failed" and v["verdict"] == PREREQ, host
    assert "the collector recorded the job's host step failed" in host["reason"], host
