"""A campaign run again, fixed, after a run the policy judged "the campaign's configuration, not the engine's"
stayed INCONCLUSIVE for good (audit 79 f2).

The first run's engine refused its arguments (a typo in ``extra_args``): its launch is withheld by
``campaign-config-error`` ("… run it again"). The fixed file was run again under the same campaign name and
every gate passed — yet the first run's collector-recorded ``gate.result`` for api-readiness, ``failed``
("no attempt reached API readiness"), was "a failure no gate judges" and blocked QUALIFIED until someone
superseded it. A run an operator cancelled, run again, earned QUALIFIED.

Now such a result is withheld under its launches' rule (``verdict._excused_results``) where every engine
launch of its job — as the log knows it: the running entry it refs as its job, the job open when the log took
it — is withheld by ``params.excusing_launch_rules`` (campaign-config-error, operator-stopped-before-ready);
the launches it refs or names only add to them (never its own claim that excuses). A launch not so withheld,
an entry it names that is no launch or that the log does not hold, a result of no job, a result of another
gate: it still blocks. Beside it, the first run's ``not_run``/``not_authorized`` harness results were listed
as spec-mismatch ("corpus digest not recorded"); they now have their own rule, ``harness-not-run``.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.errors import PolicyError
from ledger.policy.fixtures import _Builder, _logged_time
from ledger.policy.loader import load_policy
from ledger.policy.verdict import evaluate
from ledger.service import Ledger
from tests.policy.test_fail_closed import KEYS, POLICY_DIR, SUBJECT, entry, qualified_entries

QUALIFIED = "QUALIFIED"
INCONCLUSIVE = "INCONCLUSIVE"
CONFIG = "campaign-config-error"
STOPPED = "operator-stopped-before-ready"
NOT_RUN = "harness-not-run"

_BINDINGS = {
    "engine": "vllm",
    "engine_version": "0.32.0",
    "model_revision": "1111111111111111111111111111111111111111",
    "model_repo": "org/model",
    "shard:model.safetensors": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
}
_REFUSED = "__main__.py: error: unrecognized arguments: --no_such_flag 1"


def _first_run(how: str = "config") -> list[dict[str, Any]]:
    """The first job of the campaign, before the fixed run: its only launch refused its arguments
    (``how`` "config") or was cancelled by the operator while loading ("cancelled"); the collector records
    api-readiness failed (naming the launch, ``@first-launch``), semantic and benchmark not_authorized, and
    the job's end."""
    job: dict[str, Any] = {
        "name": "first-job",
        "kind": "job",
        "key": "collector",
        "at": "2026-09-10T09:30:00Z",
        "payload": {
            "job_id": "campaign-0",
            "state": "running",
            "started_at": "2026-09-10T09:30:00Z",
            "lease_seconds": 3600.0,
            "spec": {
                "bindings": {
                    "engine": "vllm",
                    "engine_version": "0.32.0",
                    "model_revision": "1111111111111111111111111111111111111111",
                    "served_name": "m",
                    "hostname": "gpu-box-1",
                    "request_token_ids": "false",
                    # the interpreter the engine runs under, as the fixed run's job binds it (fix 164)
                    "engine_python": "/opt/vllm/bin/python",
                }
            },
        },
    }
    launch: dict[str, Any] = {
        "name": "first-launch",
        "kind": "engine.launch",
        "key": "collector",
        "at": "2026-09-10T09:30:32Z",
        "refs": {"job": "first-job"},
        "payload": {
            "engine": "vllm",
            "command": ["vllm", "serve", "/models/m", "--no_such_flag", "1"],
            "attempt": 1,
            "started_at": "2026-09-10T09:30:20Z",
            "ended_at": "2026-09-10T09:30:31Z",
            "ready": False,
            "bindings": dict(_BINDINGS),
        },
    }
    if how == "config":
        launch["payload"].update(
            exit_code=2,
            failure_signature="engine-refused-arguments",
            failure_detail=_REFUSED,
            details={"stop_reason": "exited"},
        )
        launch["artifacts"] = [{"name": "stderr.log", "text": f"usage: __main__.py [-h]\n{_REFUSED}\n"}]
        end = {"state": "failed", "reason": "no attempt reached API readiness", "exit_code": 1}
    else:
        launch["payload"].update(exit_code=0, details={"stop_reason": "cancelled"})
        end = {"state": "cancelled", "cancelled_by": "SIGTERM to pid 4242"}
    result = {
        "name": "first-result",
        "kind": "gate.result",
        "key": "collector",
        "at": "2026-09-10T09:30:33Z",
        "refs": {"job": "first-job"},
        "payload": {
            "gate": "api-readiness",
            "status": "failed",
            "order": 3,
            "reason": "no attempt reached API readiness (1 tried; last failure: engine-refused-arguments)",
            "evidence": ["@first-launch"],
        },
    }
    not_run = [
        {
            "name": f"first-{gate}",
            "kind": "gate.result",
            "key": "collector",
            "at": f"2026-09-10T09:30:3{4 + i}Z",
            "refs": {"job": "first-job"},
            "payload": {
                "gate": gate,
                "status": "not_authorized",
                "order": 8 + i,
                "reason": "step api-readiness did not pass",
            },
        }
        for i, gate in enumerate(("semantic", "benchmark"))
    ]
    done = {
        "name": "first-done",
        "kind": "job",
        "key": "collector",
        "at": "2026-09-10T09:31:00Z",
        "payload": {"job_id": "campaign-0", "ended_at": "2026-09-10T09:31:00Z", **end},
    }
    return [job, launch, result, *not_run, done]


def _rerun(how: str = "config") -> list[dict[str, Any]]:
    """The first run, then the fixed run under the same campaign name (every gate passes)."""
    return _first_run(how) + qualified_entries()


def _verdict(tmp_path: Path, entries: list[dict[str, Any]], policy_dir: Path = POLICY_DIR) -> dict[str, Any]:
    """The campaign's verdict; a payload ``evidence`` item ``@name`` is the id of the entry named so."""
    home = tmp_path / f"home-{len(list(tmp_path.glob('home-*')))}"
    ledger = Ledger.init(home, genesis_at=parse_time("2026-09-10T09:00:00Z"))
    try:
        spec = {"start": "2026-09-10T09:00:00Z", "keys": KEYS, "defaults": {"subject": SUBJECT}}
        b = _Builder(ledger, {**spec, "entries": entries}, policy_dir)
        b.enrol_keys()
        for original in sorted(entries, key=_logged_time):  # in time order, as the fixtures add them
            item = copy.deepcopy(original)
            named = item.get("payload", {}).get("evidence")
            if isinstance(named, list):
                item["payload"]["evidence"] = [
                    b.names[n[1:]].entry_id if isinstance(n, str) and n.startswith("@") else n for n in named
                ]
            b.add(item)
        out = evaluate(ledger, dict(SUBJECT), load_policy("backend-qualification", policy_dir))
        out["_names"] = {e.entry_id: n for n, e in b.names.items()}
        return out
    finally:
        ledger.close()


def _rejected(v: dict[str, Any]) -> dict[str, str]:
    return {v["_names"][r["entry"]]: r["rule"] for r in v["rejected"] if r["entry"] in v["_names"]}


def _unjudged(v: dict[str, Any]) -> list[str]:
    return [v["_names"].get(u["entry"], u["entry"]) for u in v["unjudged"]]


def _policy_copy(tmp_path: Path, old: str, new: str) -> Path:
    out = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, out)
    path = out / "backend-qualification.toml"
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))
    return out


_PARAM = (
    'excusing_launch_rules = ["campaign-config-error", "operator-stopped-before-ready", "held-before-ready"]'
)


# --- the regressions ------------------------------------------------------------------------------------


def test_rerun_after_config_error_is_qualified(tmp_path: Path) -> None:
    """Regression (audit 79 f2): the first run's failed api-readiness result, whose only launch is the
    campaign's configuration, kept the fixed re-run INCONCLUSIVE for good."""
    v = _verdict(tmp_path, _rerun())
    assert v["verdict"] == QUALIFIED, (v["unjudged"], v["gates"])
    assert v["unjudged"] == []
    rej = _rejected(v)
    assert rej["first-launch"] == CONFIG and rej["first-result"] == CONFIG
    (r,) = [r for r in v["rejected"] if v["_names"].get(r["entry"]) == "first-result"]
    assert "withheld by campaign-config-error" in r["detail"] and "api-readiness" in r["detail"]
    assert not r.get("counts_against")
    assert r["by"] == next(i for i, n in v["_names"].items() if n == "first-launch")


def test_rerun_after_operator_stop_before_ready_is_qualified(tmp_path: Path) -> None:
    """The same for a first run the operator cancelled while the engine loaded, had the collector recorded
    api-readiness failed for it."""
    v = _verdict(tmp_path, _rerun("cancelled"))
    assert v["verdict"] == QUALIFIED, (v["unjudged"], v["gates"])
    rej = _rejected(v)
    assert rej["first-launch"] == STOPPED and rej["first-result"] == STOPPED


def test_config_error_result_alone_stays_inconclusive(tmp_path: Path) -> None:
    """The first run alone: no launch credited, api-readiness INCONCLUSIVE naming the rule (never QUALIFIED
    by the excuse: it withholds, it credits nothing)."""
    es = qualified_entries()
    # the host gate judges the host on its probe and the job's env snapshot (fix 157; the shared fixture's
    # refs a job this run does not have)
    env = {k: v for k, v in entry(es, "env").items() if k != "refs"}
    v = _verdict(tmp_path, [*_first_run(), entry(es, "host"), env, entry(es, "pin")])
    assert v["verdict"] == INCONCLUSIVE
    assert _rejected(v)["first-result"] == CONFIG
    api = next(g for g in v["gates"] if g["name"] == "api-readiness")
    assert api["status"] == "missing" and CONFIG in api["reason"]


def test_not_run_harness_results_are_not_spec_mismatch(tmp_path: Path) -> None:
    """Regression (audit 79 f2): the first run's not_authorized semantic and benchmark results were listed as
    spec-mismatch ("corpus digest not recorded") though they never ran."""
    v = _verdict(tmp_path, _rerun())
    rej = _rejected(v)
    assert rej["first-semantic"] == NOT_RUN and rej["first-benchmark"] == NOT_RUN
    for r in v["rejected"]:
        if v["_names"].get(r["entry"]) in ("first-semantic", "first-benchmark"):
            assert "not_authorized" in r["detail"] and "measured nothing" in r["detail"]
            assert "not recorded" not in r["detail"] and not r.get("counts_against")


@pytest.mark.parametrize("status", ["not_run", "not_authorized"])
def test_not_run_results_alone_leave_the_gate_inconclusive(tmp_path: Path, status: str) -> None:
    """Not credited and nothing against the engine: the gate has no run to judge (INCONCLUSIVE)."""
    es = qualified_entries()
    for name in ("semantic", "benchmark"):
        entry(es, name)["payload"] = {"gate": name, "status": status, "reason": "job cancelled"}
    v = _verdict(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    assert _rejected(v)["semantic"] == NOT_RUN
    sem = next(g for g in v["gates"] if g["name"] == "semantic")
    assert sem["status"] == "missing" and NOT_RUN in sem["reason"]


def test_a_failed_harness_result_without_its_spec_is_still_a_mismatch(tmp_path: Path) -> None:
    """Neighbour: only not_run/not_authorized is the new rule; a failed run that records no corpus is judged
    by the spec rules as before."""
    es = qualified_entries()
    entry(es, "semantic")["payload"] = {"gate": "semantic", "status": "failed", "reason": "3 items failed"}
    v = _verdict(tmp_path, es)
    assert _rejected(v)["semantic"] == "semantic-spec-mismatch"
    assert v["verdict"] != QUALIFIED


# --- neighbours that still block --------------------------------------------------------------------------


def test_a_result_whose_job_has_a_launch_not_withheld_still_blocks(tmp_path: Path) -> None:
    """The result claims only the refused launch; the log knows its job had another one, credited: judged
    from the log, not from the result's own claim, it still blocks."""
    es = _rerun()
    other = copy.deepcopy(entry(es, "launch"))
    other.update(name="first-ready-launch", at="2026-09-10T09:30:32.500000Z", refs={"job": "first-job"})
    other["payload"].update(attempt=2, started_at="2026-09-10T09:30:32Z")
    es.insert(es.index(entry(es, "first-result")), other)
    v = _verdict(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE
    assert "first-result" in _unjudged(v)
    assert "first-result" not in _rejected(v)


def test_a_result_naming_a_launch_of_the_fixed_run_still_blocks(tmp_path: Path) -> None:
    """What it names only adds to its job's launches: a credited launch among them keeps it blocking."""
    es = _rerun()
    first = entry(es, "first-result")
    es.remove(first)
    first["at"] = "2026-09-10T10:01:01Z"  # logged in the fixed run's job, naming its ready launch …
    first["payload"]["evidence"] = ["@first-launch", "@launch"]
    es.insert(es.index(entry(es, "health")), first)
    v = _verdict(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE and "first-result" in _unjudged(v)


@pytest.mark.parametrize("named", ["@first-job", "0" * 64])
def test_a_result_naming_what_is_no_launch_still_blocks(tmp_path: Path, named: Any) -> None:
    """An entry it names that is no launch, or that the log does not hold: not judged from the log."""
    es = _rerun()
    ev = entry(es, "first-result")["payload"]["evidence"]
    ev.append(named)
    v = _verdict(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE and "first-result" in _unjudged(v)


def test_a_result_that_refs_its_job_under_another_rel_still_blocks(tmp_path: Path) -> None:
    """Its job ref renamed (rel "subject"): it names a job entry that is no launch — blocks (and the job, now
    ended failed with no failed result of its own, is unjudged too)."""
    es = _rerun()
    entry(es, "first-result")["refs"] = {"subject": "first-job"}
    v = _verdict(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE and "first-result" in _unjudged(v)


def test_a_result_of_no_job_still_blocks(tmp_path: Path) -> None:
    """No job ref, and logged when no job of the campaign was open: which launches it records cannot be told
    from the log, whatever it names."""
    es = _rerun()
    res = entry(es, "first-result")
    es.remove(res)
    res.pop("refs")
    res["at"] = "2026-09-10T09:31:30Z"  # after the first job ended, before the fixed run
    es.insert(es.index(entry(es, "first-done")) + 1, res)
    v = _verdict(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE and "first-result" in _unjudged(v)


def test_a_failed_result_of_another_gate_still_blocks(tmp_path: Path) -> None:
    """Only the gates params.excused_result_gates names (api-readiness): a failed runtime-stability result
    in the same job is not excused."""
    es = _rerun()
    entry(es, "first-result")["payload"]["gate"] = "runtime-stability"
    v = _verdict(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE and "first-result" in _unjudged(v)


def test_a_superseded_config_error_launch_no_longer_excuses(tmp_path: Path) -> None:
    """A launch withheld by another rule (superseded): not the configuration's excuse — the result blocks
    until it is superseded too."""
    es = _rerun()
    es.insert(
        es.index(entry(es, "first-result")),
        {
            "name": "drop-launch",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T09:30:32.500000Z",
            "refs": {"supersedes": "first-launch"},
            "payload": {"reason": "recorded twice"},
        },
    )
    v = _verdict(tmp_path, es)
    assert v["verdict"] == INCONCLUSIVE and "first-result" in _unjudged(v)


def test_a_config_error_launch_that_also_shows_a_fault_is_not_excused(tmp_path: Path) -> None:
    """A refused launch whose log also shows a segmentation fault counts against the engine: never
    excused (a startup fault: the fixed run's ready launch passes the ladder, the result still blocks)."""
    es = _rerun()
    entry(es, "first-launch")["artifacts"] = [
        {
            "name": "stderr.log",
            "text": f"usage: __main__.py [-h]\nSegmentation fault (core dumped)\n{_REFUSED}\n",
        }
    ]
    v = _verdict(tmp_path, es)
    (launch,) = [r for r in v["rejected"] if v["_names"].get(r["entry"]) == "first-launch"]
    assert launch["rule"] == CONFIG and launch.get("counts_against") is True
    assert v["verdict"] != QUALIFIED and "first-result" in _unjudged(v)


# --- the params that name it -------------------------------------------------------------------------------


def test_without_the_param_nothing_is_excused(tmp_path: Path) -> None:
    """The param left out: the result blocks, as before (fail closed)."""
    pdir = _policy_copy(tmp_path, _PARAM + "\n", "")
    v = _verdict(tmp_path, _rerun(), pdir)
    assert v["verdict"] == INCONCLUSIVE and "first-result" in _unjudged(v)


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ('excusing_launch_rules = "campaign-config-error"', "must be a list of rule names"),
        ('excusing_launch_rules = ["campaign-config-eror"]', "'campaign-config-eror', no rule"),
        ("excusing_launch_rules = [1]", "must be a list of rule names"),
        ('excused_result_gates = ["api-readines"]', "unknown gate.*'api-readines'"),
    ],
)
def test_a_mistyped_param_is_a_policy_error(tmp_path: Path, value: str, match: str) -> None:
    old = _PARAM if value.startswith("excusing") else 'excused_result_gates = ["api-readiness"]'
    pdir = _policy_copy(tmp_path, old, value)
    with pytest.raises(PolicyError, match=match):
        _verdict(tmp_path, _rerun(), pdir)
