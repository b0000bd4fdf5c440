"""Fix 65 (audit 53): the engine's version is read under the environment the engine runs with.

The engine ran under ``{**os.environ, **[engine] env, **attempt env}`` while its version and ``pip
freeze`` were read under this process's environment alone: a campaign ``PYTHONPATH`` that put another
llama-cpp-python in front ran 0.2.90 and recorded 0.3.36 (subject ``backend_version``, every launch's
``engine_version`` binding, ``env.snapshot``). Now one merge (``launch.launch_env``) serves the launch and
every reading of the interpreter; each attempt's environment is read, and attempts whose environments give
the interpreter other software are refused before anything is recorded (one job qualifies one engine).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.collectors.host import engine_env
from ledger.collectors.launch import EngineRun, LaunchSpec, inherited_env, launch_env
from ledger.errors import ConfigError
from ledger.recorder import LocalRecorder
from ledger.service import Ledger


def _shadow(tmp_path: Path, version: str, name: str = "llama_cpp_python") -> Path:
    """A folder that, on PYTHONPATH, holds a distribution of llama-cpp-python ``version``."""
    d = tmp_path / f"shadow-{name}-{version}"
    info = d / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    dist = name.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return d


def _campaign(
    tmp_path: Path,
    model_dir: Path,
    *,
    env: dict[str, str] | None = None,
    attempts: list[dict[str, str]] | None = None,
    backend_version: str | None = None,
) -> Path:
    command = ["{python}", "-m", "llama_cpp.server", "--model", "{model}", "--model_alias", "{served_name}"]
    lines = ['[campaign]\nid = "c"']
    if backend_version is not None:
        lines.append(f'backend_version = "{backend_version}"')
    lines += [
        f'\n[model]\npath = "{model_dir}"\nserved_name = "tiny"\n',
        f'[engine]\nkind = "llamacpp"\npython = "{sys.executable}"\ncommand = {json.dumps(command)}',
    ]
    if env is not None:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
    for i, a_env in enumerate(attempts or [{}]):
        lines.append(f'\n[[engine.attempts]]\nname = "a{i + 1}"')
        if a_env:
            lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in a_env.items()) + " }")
    p = tmp_path / "c.toml"
    p.write_text("\n".join(lines) + "\n")
    return p


def _runner(path: Path, recorder: LocalRecorder, tmp_path: Path) -> CampaignRunner:
    return CampaignRunner(load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False)


def test_engine_version_read_without_the_campaigns_engine_env(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, ledger: Ledger
) -> None:
    shadow = _shadow(tmp_path, "0.2.90")
    runner = _runner(_campaign(tmp_path, tiny_model_dir, env={"PYTHONPATH": str(shadow)}), recorder, tmp_path)
    size = ledger.size()
    runner._preflight()
    assert runner.engine_version == "0.2.90"
    assert runner.subject["backend_version"] == "0.2.90"
    assert runner._env is not None
    assert runner._env.payload["packages"]["llama-cpp-python"] == "0.2.90"
    assert runner._env.payload["env"]["PYTHONPATH"] == str(shadow)  # what it was read under
    assert "llama-cpp-python==0.2.90" in runner._env.freeze.replace("llama_cpp_python", "llama-cpp-python")
    assert runner._job_spec()["bindings"]["engine_version"] == "0.2.90"
    assert ledger.size() == size  # nothing recorded yet


def test_engine_version_read_without_the_attempts_env(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder
) -> None:
    shadow = _shadow(tmp_path, "0.2.90")
    path = _campaign(tmp_path, tiny_model_dir, attempts=[{"PYTHONPATH": str(shadow)}])
    runner = _runner(path, recorder, tmp_path)
    runner._preflight()
    assert runner.engine_version == "0.2.90"


def test_no_engine_env_reads_this_process_environment(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder
) -> None:
    runner = _runner(_campaign(tmp_path, tiny_model_dir), recorder, tmp_path)
    runner._preflight()
    assert runner.engine_version is None  # this interpreter has no llama-cpp-python


def test_claimed_backend_version_is_checked_against_the_version_under_the_engine_env(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder
) -> None:
    shadow = _shadow(tmp_path, "0.2.90")
    ok = _campaign(tmp_path, tiny_model_dir, env={"PYTHONPATH": str(shadow)}, backend_version="0.2.90")
    _runner(ok, recorder, tmp_path)._preflight()
    bad = _campaign(tmp_path, tiny_model_dir, env={"PYTHONPATH": str(shadow)}, backend_version="0.3.36")
    with pytest.raises(ConfigError, match=r"backend_version = '0.3.36'.*llama-cpp-python 0.2.90"):
        _runner(bad, recorder, tmp_path)._preflight()


def test_attempts_running_different_engine_versions_are_refused_before_recording(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, ledger: Ledger
) -> None:
    old, new = _shadow(tmp_path, "0.2.90"), _shadow(tmp_path, "0.3.36")
    path = _campaign(tmp_path, tiny_model_dir, attempts=[{"PYTHONPATH": str(new)}, {"PYTHONPATH": str(old)}])
    size = ledger.size()
    with pytest.raises(ConfigError) as e:
        _runner(path, recorder, tmp_path)._preflight()
    msg = e.value.message
    assert "llama-cpp-python 0.3.36 for attempt 'a1'" in msg
    assert "llama-cpp-python 0.2.90 for attempt 'a2'" in msg
    assert ledger.size() == size


def test_one_attempt_with_the_engine_one_without_is_refused(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder
) -> None:
    shadow = _shadow(tmp_path, "0.2.90")
    path = _campaign(tmp_path, tiny_model_dir, attempts=[{}, {"PYTHONPATH": str(shadow)}])
    with pytest.raises(ConfigError, match=r"no engine package for attempt 'a1'.*0\.2\.90 for attempt 'a2'"):
        _runner(path, recorder, tmp_path)._preflight()


def test_attempts_with_other_packages_but_one_engine_version_are_refused(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder
) -> None:
    shadow = _shadow(tmp_path, "0.2.90")
    extra = _shadow(tmp_path, "9.9", name="some_other_pkg")
    both = f"{shadow}{os.pathsep}{extra}"
    path = _campaign(
        tmp_path, tiny_model_dir, env={"PYTHONPATH": str(shadow)}, attempts=[{}, {"PYTHONPATH": both}]
    )
    with pytest.raises(ConfigError, match=r"attempts 'a1' and 'a2': other packages"):
        _runner(path, recorder, tmp_path)._preflight()


def test_attempts_whose_env_differs_without_other_software_load(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder
) -> None:
    shadow = _shadow(tmp_path, "0.2.90")
    path = _campaign(
        tmp_path,
        tiny_model_dir,
        env={"PYTHONPATH": str(shadow)},
        attempts=[{}, {"LLAMA_ARG_N_GPU_LAYERS": "0"}, {"PYTHONPATH": str(shadow)}],
    )
    runner = _runner(path, recorder, tmp_path)
    runner._preflight()
    assert runner.engine_version == "0.2.90"


@pytest.mark.parametrize("preflight", [True, False], ids=["read-before-the-job", "read-by-the-gate"])
def test_host_gate_reads_the_interpreter_under_the_first_attempts_env(
    tmp_path: Path, tiny_model_dir: Path, recorder: LocalRecorder, ledger: Ledger, preflight: bool
) -> None:
    shadow = _shadow(tmp_path, "0.2.90")
    path = _campaign(tmp_path, tiny_model_dir, attempts=[{"PYTHONPATH": str(shadow)}, {}])
    runner = _runner(path, recorder, tmp_path)
    if preflight:
        with pytest.raises(ConfigError):  # the second attempt runs no llama-cpp-python
            runner._preflight()
    status, _, evidence, _ = runner._gate_host()
    assert status == "passed" and len(evidence) == 2  # host.probe, env.snapshot
    snaps = [e.to_json() for e in ledger.query(kind="env.snapshot", limit=10)]
    assert len(snaps) == 1
    assert snaps[0]["payload"]["packages"]["llama-cpp-python"] == "0.2.90"
    assert snaps[0]["payload"]["env"]["PYTHONPATH"] == str(shadow)


def test_engine_env_reads_under_the_env_it_is_given(tmp_path: Path) -> None:
    shadow = _shadow(tmp_path, "0.2.90")
    info = engine_env(sys.executable, launch_env({"PYTHONPATH": str(shadow)}))
    assert info.payload["packages"].get("llama-cpp-python") == "0.2.90"
    assert engine_env(sys.executable).payload["packages"].get("llama-cpp-python") is None


def test_launch_env_is_the_merge_the_engine_runs_under(tmp_path: Path) -> None:
    merged = launch_env({"PYTHONPATH": "/x", "PATH": "/only"})
    assert merged["PYTHONPATH"] == "/x" and merged["PATH"] == "/only"
    # the engine inherits only the allow-list of this process's environment (fix 104, audit 83 f10: an
    # operator's shell variable the launch does not record never reaches the engine), then what it is given
    inherited = inherited_env(os.environ)
    assert all(merged[k] == v for k, v in inherited.items() if k not in ("PYTHONPATH", "PATH"))
    assert set(merged) == set(inherited) | {"PYTHONPATH", "PATH"}
    # the engine sees it: a launch given PYTHONPATH runs with it
    out = tmp_path / "seen.txt"
    code = f"import os; open({str(out)!r}, 'w').write(os.environ.get('PYTHONPATH', ''))"
    spec = LaunchSpec(
        engine="generic",
        command=[sys.executable, "-c", code],
        base_url="http://127.0.0.1:9",
        lease_seconds=10,
        env={"PYTHONPATH": "/seen"},
    )
    run = EngineRun(spec, tmp_path / "logs")
    run.start()
    try:
        assert run.wait_exit(10)
    finally:
        run.stop("test")
    assert out.read_text() == "/seen"
