"""Fix 164 (issue 11, audit 105 f3): ``ledger collect run`` binds the engine's interpreter it snapshots.

The host-prerequisites gate counts an ``env.snapshot`` only of the interpreter the campaign's job binds
(``spec.bindings.engine_python``, ``ledger.policy.names.ENGINE_PYTHON``): the collector binds the one it
reads the engine's version in, records the snapshot of and fills each launch's ``{python}`` with — one
text — and records it in each launch's bindings too. A stub engine's campaign (its interpreter lists no
engine package) still passes the gate, and one that fails before any launch is still NOT QUALIFIED —
PREREQUISITES (fix 163, taken back, made it INCONCLUSIVE).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ledger.collectors.campaign import CampaignRunner, load_campaign, policy_verdict
from ledger.policy.names import ENGINE_PYTHON
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of
from .test_fix76_pin_covers_what_loads import split_gguf  # noqa: F401 (fixture)
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401 (fixture)

PREREQ = "NOT QUALIFIED — PREREQUISITES"


def _quick(path: Path) -> Path:
    """The stub campaign without its harnesses (the host gate is what is judged here)."""
    text = path.read_text()
    for gate in ("semantic", "benchmark"):
        marker = f"[gates.{gate}]\nenabled = true"
        assert text.count(marker) == 1, gate
        text = text.replace(marker, f"[gates.{gate}]\nenabled = false")
    path.write_text(text)
    return path


def _run(path: Path, recorder: LocalRecorder, tmp_path: Path, policy: Any) -> Any:
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False, policy=policy
    )
    return runner.run()


def _host_gate(v: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == "host-prerequisites")


def test_a_stub_campaign_binds_the_interpreter_it_snapshots_and_launches_and_passes_the_host_gate(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    policy = policy_with(tmp_path, corpus[1])
    _run(_quick(stub_campaign(tmp_path, tiny_model_dir, corpus)), recorder, tmp_path, policy)
    (job,) = [j for j in entries_of(ledger, "job") if j["payload"]["state"] == "running"]
    (snap,) = entries_of(ledger, "env.snapshot")
    (launch,) = entries_of(ledger, "engine.launch")
    bound = job["payload"]["spec"]["bindings"][ENGINE_PYTHON]
    # one interpreter: the job's binding, the snapshot's, the launch's binding and the {python} it ran
    assert bound == sys.executable == snap["payload"]["interpreter"]
    assert launch["payload"]["bindings"][ENGINE_PYTHON] == bound
    assert launch["payload"]["command"][0] == bound
    assert (
        snap["payload"]["packages"].get("vllm") is None
    )  # no engine package: the binding is the interpreter
    v = policy_verdict(recorder, {"campaign": "harness"}, policy)
    assert v is not None
    assert _host_gate(v)["status"] == "passed", _host_gate(v)
    assert v["manifest"]["bindings"][ENGINE_PYTHON] == bound


def test_a_stub_campaign_that_fails_before_any_launch_is_not_qualified_on_prerequisites(
    tmp_path: Path,
    split_gguf: Path,  # noqa: F811
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """The model pin fails (a split of the model's set is missing): nothing is launched. The host step
    recorded the stub interpreter's snapshot, the job binds it: the gate passes, the pin fails the verdict."""
    split_gguf.with_name("tt-00002-of-00002.gguf").unlink()
    policy = policy_with(tmp_path, corpus[1])
    result = _run(_quick(stub_campaign(tmp_path, split_gguf, corpus)), recorder, tmp_path, policy)
    assert result.state == "failed"
    assert entries_of(ledger, "engine.launch") == []
    (job,) = [j for j in entries_of(ledger, "job") if j["payload"]["state"] == "running"]
    assert job["payload"]["spec"]["bindings"][ENGINE_PYTHON] == sys.executable
    v = policy_verdict(recorder, {"campaign": "harness"}, policy)
    assert v is not None
    assert _host_gate(v)["status"] == "passed", _host_gate(v)
    assert v["verdict"] == PREREQ, [(g["name"], g["status"], g.get("reason")) for g in v["gates"]]


def test_a_campaign_naming_its_engine_python_binds_that_one(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    recorder: LocalRecorder,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """``[engine] python`` another path to an interpreter (a link to this one): bound as written, the
    snapshot and the launch are of that same text."""
    link = tmp_path / "venv" / "bin" / "python"
    link.parent.mkdir(parents=True)
    link.symlink_to(sys.executable)
    path = stub_campaign(tmp_path, tiny_model_dir, corpus)
    path.write_text(path.read_text().replace(f'python = "{sys.executable}"', f'python = "{link}"', 1))
    policy = policy_with(tmp_path, corpus[1])
    _run(_quick(path), recorder, tmp_path, policy)
    (job,) = [j for j in entries_of(ledger, "job") if j["payload"]["state"] == "running"]
    (snap,) = entries_of(ledger, "env.snapshot")
    (launch,) = entries_of(ledger, "engine.launch")
    assert job["payload"]["spec"]["bindings"][ENGINE_PYTHON] == str(link) == snap["payload"]["interpreter"]
    assert launch["payload"]["bindings"][ENGINE_PYTHON] == str(link)
    v = policy_verdict(recorder, {"campaign": "harness"}, policy)
    assert v is not None and _host_gate(v)["status"] == "passed", v and _host_gate(v)
