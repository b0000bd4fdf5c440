"""Fix 164 (issue 11, audit 105 f3): an env snapshot of any interpreter satisfied the host gate.

Fix 157 made host-prerequisites pass only beside an ``env.snapshot`` of the campaign filed under a probed
host, but never read which interpreter it was of: ``ledger collect host --campaign c1`` without
``--engine-python`` snapshots the ledger's own venv (no engine package in it), and the gate passed on it
beside a vLLM launch. (Fix 163 bound the snapshot to a launch's command or to the engine's package and was
taken back: every hand-built campaign that switched the shared fixture's engine, and every ``collect run``
that failed before a launch under a stub interpreter, read INCONCLUSIVE.)

Now the binding is derived from the log, one name for both sides (``ledger.policy.names.ENGINE_PYTHON``):
``ledger collect run`` binds the interpreter it snapshots and launches with in its job's
``spec.bindings.engine_python`` (and in each launch's bindings), and the gate counts a snapshot only where
its ``interpreter`` is that one, exactly as recorded. Where the job binds none (a campaign entered by hand,
an older ledger), a snapshot counts only where a launch of the campaign ran its interpreter (an item of its
recorded command); otherwise the gate is INCONCLUSIVE saying what to record. A failure still needs no
snapshot.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import SchemaError
from ledger.policy.acceptance import manifest_keys_read
from ledger.policy.loader import load_policy
from ledger.policy.names import ENGINE_PYTHON
from tests.policy.test_fail_closed import POLICY_DIR, entry, qualified_entries, verdict_of

ENGINE_PY = "/opt/vllm/bin/python"  # the shared fixture's: its job binds it, its snapshot is of it
LEDGER_OWN = "/work/main/.venv/bin/python"  # what the audit's default `collect host` recorded
PREREQ = "NOT QUALIFIED — PREREQUISITES"
NOT_ITS = "the job's env snapshot is not of the interpreter its engine runs under"
UNTOLD = "the job's env snapshot cannot be told to be of the interpreter its engine runs under"
PY_LAUNCH = [ENGINE_PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m"]
REPO = Path(__file__).resolve().parents[2]


def _host_gate(v: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == "host-prerequisites")


def _bindings(es: list[dict[str, Any]]) -> dict[str, Any]:
    b: dict[str, Any] = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    return b


def _snapshot(es: list[dict[str, Any]]) -> dict[str, Any]:
    p: dict[str, Any] = entry(es, "env")["payload"]
    return p


def _passes(v: dict[str, Any]) -> None:
    assert _host_gate(v)["status"] == "passed", _host_gate(v)
    assert v["verdict"] == "QUALIFIED", (v["verdict"], v["unjudged"])


def _not_its(v: dict[str, Any], said: str = NOT_ITS) -> dict[str, Any]:
    host = _host_gate(v)
    assert host["status"] == "missing", host
    assert said in host["reason"] and "--engine-python" in host["reason"], host
    assert v["verdict"] == "INCONCLUSIVE"
    return host


def _unbound(es: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job binds no engine interpreter (a job recorded before fix 164)."""
    _bindings(es).pop(ENGINE_PYTHON)
    return es


def _second_snapshot(es: list[dict[str, Any]], name: str, interpreter: str, at: str) -> dict[str, Any]:
    e = copy.deepcopy(entry(es, "env"))
    e.update(name=name, at=at)
    e["payload"] = {"interpreter": interpreter, "python": "3.12.3", "packages": {}}
    es.append(e)
    return e


def _supersede(es: list[dict[str, Any]], target: str, at: str = "2026-09-10T10:00:09Z") -> None:
    es.append(
        {
            "name": f"{target}-withdrawn",
            "kind": "supersession",
            "key": "operator",
            "at": at,
            "refs": {"supersedes": target},
            "payload": {"reason": "recorded by mistake"},
        }
    )


# --- the failure ------------------------------------------------------------------------------------------


def test_a_snapshot_of_another_interpreter_than_the_job_binds_is_not_the_engines(tmp_path: Path) -> None:
    """The audit's case: the job binds the engine's interpreter, the only snapshot is of the ledger's own
    (`collect host --campaign c1` without --engine-python): the gate cannot pass on it."""
    es = qualified_entries()
    entry(es, "env")["payload"] = {"interpreter": LEDGER_OWN, "python": "3.12.3", "packages": {}}
    host = _not_its(verdict_of(tmp_path, es))
    assert repr(ENGINE_PY) in host["reason"], host  # names the interpreter the job binds


def test_the_snapshot_of_the_interpreter_the_job_binds_passes(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, qualified_entries())
    _passes(v)
    assert v["manifest"]["bindings"][ENGINE_PYTHON] == ENGINE_PY


def test_a_snapshot_listing_no_engine_package_passes_where_it_is_the_bound_interpreter(
    tmp_path: Path,
) -> None:
    """What fix 163 lost: the binding is the interpreter, not a package list (a generic engine, a stub)."""
    es = qualified_entries()
    _snapshot(es)["packages"] = {}
    _passes(verdict_of(tmp_path, es))


@pytest.mark.parametrize("engine", ["llamacpp", "llama.cpp", "sglang", "generic"])
def test_switching_the_campaigns_engine_needs_no_other_snapshot(tmp_path: Path, engine: str) -> None:
    """The tests that switch the shared fixture's engine (fix 163 broke 40 of them): the job still binds
    the interpreter its snapshot is of, whatever engine runs in it."""
    es = qualified_entries()
    launch = entry(es, "launch")["payload"]
    launch["engine"] = launch["bindings"]["engine"] = engine
    _bindings(es)["engine"] = engine
    v = verdict_of(tmp_path, es, subject={"campaign": "neighbour-campaign-7"})
    assert _host_gate(v)["status"] == "passed", _host_gate(v)


# --- the job's binding ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bound",
    [
        "",  # blank: binds no interpreter
        " ",
        f"{ENGINE_PY} ",  # trailing whitespace: another text
        f" {ENGINE_PY}",
        f"{ENGINE_PY}/",  # a trailing slash
        "/opt/vllm/bin/python3",  # another path (a symlink to it, maybe: not shown to be)
        "/OPT/VLLM/BIN/PYTHON",
        "python",  # a bare name: not the path the snapshot records
    ],
)
def test_a_binding_other_than_the_snapshots_interpreter_binds_nothing(tmp_path: Path, bound: str) -> None:
    es = qualified_entries()
    _bindings(es)[ENGINE_PYTHON] = bound
    _not_its(verdict_of(tmp_path, es))


@pytest.mark.parametrize("bound", [7, [ENGINE_PY], {"path": ENGINE_PY}, None, True])
def test_a_binding_mistyped_is_refused_at_ingest(tmp_path: Path, bound: Any) -> None:
    es = qualified_entries()
    _bindings(es)[ENGINE_PYTHON] = bound
    with pytest.raises(SchemaError, match=r"spec\.bindings must be an object of strings"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("key", ["engine-python", "enginePython", "engine_pyhton", "Engine_Python"])
def test_a_binding_misspelled_is_not_read_as_absent(tmp_path: Path, key: str) -> None:
    """Renamed: what the approval meant to bind cannot be told — even where a launch ran the snapshot's
    interpreter (the fallback would pass), the verdict is not QUALIFIED, naming the misspelling."""
    es = qualified_entries()
    _bindings(es)[key] = _bindings(es).pop(ENGINE_PYTHON)
    entry(es, "launch")["payload"]["command"] = list(PY_LAUNCH)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["verdict"]
    assert any(ENGINE_PYTHON in u["detail"] and key in u["detail"] for u in v["unjudged"]), v["unjudged"]


def test_two_jobs_that_bind_different_interpreters_bind_none(tmp_path: Path) -> None:
    """The campaign's approved spec is one spec: a later job binding another interpreter conflicts, and
    no snapshot equals the conflict."""
    es = qualified_entries()
    later = copy.deepcopy(entry(es, "campaign-job"))
    later.update(name="campaign-job-2", at="2026-09-10T10:00:02Z")
    later["payload"]["job_id"] = "campaign-2"
    later["payload"]["spec"]["bindings"][ENGINE_PYTHON] = LEDGER_OWN
    es.append(later)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    assert _host_gate(v)["status"] == "missing", _host_gate(v)
    assert "conflict" in _host_gate(v)["reason"], _host_gate(v)


# --- launches that record the interpreter they ran -------------------------------------------------------


def test_a_launch_that_records_the_bound_interpreter_passes(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["bindings"][ENGINE_PYTHON] = ENGINE_PY
    _passes(verdict_of(tmp_path, es))


@pytest.mark.parametrize("ran", [LEDGER_OWN, f"{ENGINE_PY} ", ""])
def test_a_launch_that_records_another_interpreter_than_the_job_binds_is_not_the_snapshots(
    tmp_path: Path, ran: str
) -> None:
    es = qualified_entries()
    entry(es, "launch")["payload"]["bindings"][ENGINE_PYTHON] = ran
    _not_its(verdict_of(tmp_path, es))


# --- the snapshot's interpreter ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "interpreter",
    [f"{ENGINE_PY} ", f"{ENGINE_PY}\n", f"{ENGINE_PY}/", "/opt/vllm/bin/python3", "/OPT/VLLM/BIN/PYTHON", ""],
)
def test_a_snapshot_of_another_spelling_is_not_the_bound_interpreter(
    tmp_path: Path, interpreter: str
) -> None:
    es = qualified_entries()
    _snapshot(es)["interpreter"] = interpreter
    _not_its(verdict_of(tmp_path, es))


@pytest.mark.parametrize("interpreter", [[ENGINE_PY], None, 7])
def test_a_snapshot_interpreter_mistyped_is_refused_at_ingest(tmp_path: Path, interpreter: Any) -> None:
    es = qualified_entries()
    _snapshot(es)["interpreter"] = interpreter
    with pytest.raises(SchemaError, match="interpreter"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("key", ["executable", "Interpreter", None])
def test_a_snapshot_interpreter_renamed_or_dropped_is_refused_at_ingest(tmp_path: Path, key: Any) -> None:
    es = qualified_entries()
    value = _snapshot(es).pop("interpreter")
    if key is not None:
        _snapshot(es)[key] = value
    with pytest.raises(SchemaError, match="interpreter: Field required"):
        verdict_of(tmp_path, es)


# --- which snapshot ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("at", ["2026-09-10T10:00:07Z", "2026-09-10T10:00:05Z"])
def test_the_engines_snapshot_beside_another_interpreters_still_passes(tmp_path: Path, at: str) -> None:
    """A second snapshot of the ledger's own interpreter (logged after the engine's, or before it) takes
    nothing away: one snapshot of the bound interpreter is what the gate asks for."""
    es = qualified_entries()
    _second_snapshot(es, "env-ledger", LEDGER_OWN, at)
    _passes(verdict_of(tmp_path, es))


def test_the_engines_snapshot_superseded_leaves_only_the_other_interpreters(tmp_path: Path) -> None:
    es = qualified_entries()
    _second_snapshot(es, "env-ledger", LEDGER_OWN, "2026-09-10T10:00:07Z")
    _supersede(es, "env")
    _not_its(verdict_of(tmp_path, es))


def test_the_other_interpreters_snapshot_superseded_changes_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _second_snapshot(es, "env-ledger", LEDGER_OWN, "2026-09-10T10:00:07Z")
    _supersede(es, "env-ledger")
    _passes(verdict_of(tmp_path, es))


def test_the_bound_interpreters_snapshot_of_another_campaign_binds_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _second_snapshot(es, "env-ledger", LEDGER_OWN, "2026-09-10T10:00:07Z")
    entry(es, "env")["subject"] = {"campaign": "another-campaign"}
    _not_its(verdict_of(tmp_path, es))


# --- no binding: the launch that ran it ----------------------------------------------------------------


def test_without_a_binding_the_launch_that_ran_the_snapshots_interpreter_binds_it(tmp_path: Path) -> None:
    es = _unbound(qualified_entries())
    entry(es, "launch")["payload"]["command"] = list(PY_LAUNCH)
    v = verdict_of(tmp_path, es)
    _passes(v)
    assert ENGINE_PYTHON not in v["manifest"]["bindings"]


def test_without_a_binding_a_launch_behind_a_launcher_binds_it_too(tmp_path: Path) -> None:
    es = _unbound(qualified_entries())
    entry(es, "launch")["payload"]["command"] = ["taskset", "-c", "0-3", *PY_LAUNCH]
    _passes(verdict_of(tmp_path, es))


def test_without_a_binding_a_launch_that_names_no_interpreter_cannot_tell(tmp_path: Path) -> None:
    """`vllm serve`: which interpreter the console script runs is not in the record."""
    es = _unbound(qualified_entries())
    host = _not_its(verdict_of(tmp_path, es), UNTOLD)
    assert f"spec.bindings.{ENGINE_PYTHON}" in host["reason"], host


def test_without_a_binding_or_a_launch_the_gate_cannot_tell(tmp_path: Path) -> None:
    es = [e for e in _unbound(qualified_entries()) if e.get("name") != "launch"]
    _not_its(verdict_of(tmp_path, es), UNTOLD)


@pytest.mark.parametrize(
    "item", [f"{ENGINE_PY}/", f"{ENGINE_PY} ", "/opt/vllm/bin/python3", f"--python={ENGINE_PY}", ""]
)
def test_without_a_binding_a_launch_of_another_spelling_binds_nothing(tmp_path: Path, item: str) -> None:
    es = _unbound(qualified_entries())
    entry(es, "launch")["payload"]["command"] = [item, *PY_LAUNCH[1:]]
    _not_its(verdict_of(tmp_path, es), UNTOLD)


def test_without_a_binding_a_launch_of_another_campaign_binds_nothing(tmp_path: Path) -> None:
    es = _unbound(qualified_entries())
    launch = copy.deepcopy(entry(es, "launch"))
    launch.update(
        name="launch-elsewhere", at="2026-09-10T10:00:50Z", subject={"campaign": "another-campaign"}
    )
    launch["payload"]["command"] = list(PY_LAUNCH)
    launch.pop("refs", None)
    es.append(launch)
    _not_its(verdict_of(tmp_path, es), UNTOLD)


def test_without_a_binding_a_superseded_launch_binds_nothing(tmp_path: Path) -> None:
    es = _unbound(qualified_entries())
    entry(es, "launch")["payload"]["command"] = list(PY_LAUNCH)
    _supersede(es, "launch", at="2026-09-10T10:02:30Z")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != "QUALIFIED"
    assert _host_gate(v)["status"] == "missing" and UNTOLD in _host_gate(v)["reason"], _host_gate(v)


# --- what a failure needs -----------------------------------------------------------------------------------


def test_a_probe_that_shows_no_gpu_fails_beside_a_snapshot_of_another_interpreter(tmp_path: Path) -> None:
    """A failure needs only what shows it (fix 157): the snapshot not being the engine's does not hide it."""
    es = qualified_entries()
    _snapshot(es)["interpreter"] = LEDGER_OWN
    entry(es, "host")["payload"]["gpus"] = []
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed", _host_gate(v)
    assert v["verdict"] == PREREQ


def test_a_failed_collector_host_step_fails_the_gate_without_any_snapshot(tmp_path: Path) -> None:
    es = [e for e in qualified_entries() if e.get("name") != "env"]
    es.append(
        {
            "name": "host-step",
            "kind": "gate.result",
            "key": "collector",
            "at": "2026-09-10T10:00:07Z",
            "refs": {"job": "campaign-job"},
            "payload": {
                "gate": "host-prerequisites",
                "status": "failed",
                "order": 1,
                "reason": f"engine interpreter {ENGINE_PY} not found",
            },
        }
    )
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed" and v["verdict"] == PREREQ, _host_gate(v)
    assert "not found" in _host_gate(v)["reason"]


@pytest.mark.parametrize("engine", ["generic", "vllm"])
def test_a_run_that_failed_before_any_launch_under_a_stub_interpreter_is_not_qualified(
    tmp_path: Path, engine: str
) -> None:
    """What fix 163 lost: `collect run` with a stub engine (its interpreter lists no engine package) whose
    model pin fails — no launch. The job binds the stub's interpreter, the snapshot is of it: the host gate
    passes and the pin fails, NOT QUALIFIED — PREREQUISITES (not INCONCLUSIVE)."""
    stub = "/tmp/venvs/stub/bin/python"
    es = [e for e in qualified_entries() if e.get("name") in ("campaign-job", "host", "env", "pin")]
    _bindings(es).update({"engine": engine, ENGINE_PYTHON: stub})
    _bindings(es).pop("engine_version")
    entry(es, "env")["payload"] = {"interpreter": stub, "python": "3.11.9", "packages": {}}
    entry(es, "pin")["payload"]["verification"] = "failed"
    v = verdict_of(tmp_path, es, subject={"campaign": "neighbour-campaign-7"})
    assert _host_gate(v)["status"] == "passed", _host_gate(v)
    assert v["verdict"] == PREREQ, [(g["name"], g["status"], g.get("reason")) for g in v["gates"]]


# --- one vocabulary --------------------------------------------------------------------------------------


def test_the_policy_reads_the_binding_under_the_collectors_name() -> None:
    policy = load_policy("backend-qualification", POLICY_DIR)
    assert ENGINE_PYTHON in manifest_keys_read(policy)
    from ledger.collectors import campaign

    assert campaign.ENGINE_PYTHON is ENGINE_PYTHON
    assert ENGINE_PYTHON in campaign.NOT_BOUND  # judged by the host gate, not a launch-binding comparison


# --- `ledger collect host --campaign` without --engine-python -------------------------------------------


def _collect_host(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # this checkout's code, run from its root (the venv's `ledger` may be another checkout's editable install)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400"}
    init = [sys.executable, "-m", "ledger.cli", "init", "--home", str(home)]
    subprocess.run(init, capture_output=True, text=True, timeout=120, check=True, env=env, cwd=REPO)
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "collect", "host", "--home", str(home), "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=REPO,
    )


def test_collect_host_for_a_campaign_without_engine_python_warns_it_snapshots_its_own(tmp_path: Path) -> None:
    import json

    r = _collect_host(tmp_path / "home", "--campaign", "c1")
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert "no --engine-python" in said and "host-prerequisites" in said, r.stderr
    assert sys.executable in said and f"spec.bindings.{ENGINE_PYTHON}" in said, r.stderr
    (snap,) = json.loads(r.stdout)["env_snapshots"]
    assert snap["interpreter"] == sys.executable  # recorded as asked: the gate judges it


def test_collect_host_naming_the_engines_interpreter_does_not_warn(tmp_path: Path) -> None:
    r = _collect_host(tmp_path / "home", "--campaign", "c1", "--engine-python", sys.executable)
    assert r.returncode == 0, r.stderr
    assert "no --engine-python" not in " ".join(r.stderr.split()), r.stderr
