"""Fix 155 (audit 102 f1, issue 11): a harness run the store could not keep is recorded as run.

A benchmark completed and failed (its run invalid: 95 of 96 requests); storing its artifacts hit ENOSPC; the
collector recorded its ``gate.result`` ``not_run`` ("the collector stopped: no space left …") and exited 2;
the policy rejected that as ``harness-not-run`` ("it measured nothing") and its hint invited a supersession
of the job ("if it says nothing about the engine"); superseding as hinted and running again gave QUALIFIED,
the failed run never on record.

Now a harness run that ran is recorded as it ran — status, figures, counts, reason — with its artifacts by
reference where the store refuses them (``stored: false``, why in ``bounds.artifacts_not_stored``, as a
launch's logs are), and the job ends as its gates decided. The policy reads a harness's per-request record
back: one recorded by reference credits no pass (harness-artifact-mismatch: INCONCLUSIVE) and a failure
still counts against the engine. A run whose result the ledger refuses even so is never recorded
``not_run``: the job's end says it ran, what it showed, and that it is not to be superseded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ledger.collectors.campaign import CampaignRunner, load_campaign
from ledger.errors import StorageError
from ledger.policy.loader import load_policy
from ledger.policy.verdict import evaluate
from ledger.recorder import LocalRecorder
from ledger.service import Ledger

from .conftest import entries_of
from .test_harness_gates import corpus, policy_with, stub_campaign  # noqa: F401 (fixture)

NO_SPACE = "no space left while storing an artifact in the store"


class _FillingStore(LocalRecorder):
    """The home's recorder, whose store refuses (a full disk) the artifacts ``refuse`` names; by reference
    they are hashed in place, as on a full disk. ``refuse_record`` refuses an entry (the ledger itself)."""

    def __init__(
        self,
        ledger: Ledger,
        refuse: Callable[[str], bool],
        refuse_record: Callable[[str, dict[str, Any]], bool] = lambda _k, _p: False,
    ) -> None:
        super().__init__(ledger, "collector")
        self.refuse = refuse
        self.refuse_record = refuse_record

    def artifact(self, name: str, path: Path, *, by_reference: bool = False, **kw: Any) -> Any:
        if not by_reference and self.refuse(name):
            raise StorageError(NO_SPACE)
        return super().artifact(name, path, by_reference=by_reference, **kw)

    def record(self, kind: str, subject: dict[str, str], payload: dict[str, Any], **kw: Any) -> str:
        if self.refuse_record(kind, payload):
            raise StorageError("no space left while appending to the log")
        return super().record(kind, subject, payload, **kw)


def _unreviewed(tmp_path: Path, digest: str, **params: str) -> Any:
    """The shipped policies (``policy_with``) asking no review or acceptance of harness results: the
    ladder reaches the benchmark gate on the recorded evidence alone (a dirty checkout binds no commit a
    review PASS could name)."""
    policy_with(tmp_path, digest, **params)
    d = tmp_path / "policies"
    acc = d / "evidence-acceptance.toml"
    text = acc.read_text()
    for name in ("reviewed_gates", "accepted_gates"):
        lines = [ln for ln in text.splitlines() if ln.startswith(f"{name} = ")]
        assert len(lines) == 1, name
        text = text.replace(lines[0], f"{name} = []")
    acc.write_text(text)
    return load_policy(str(d / "backend-qualification.toml"), d)


def _run(path: Path, recorder: LocalRecorder, tmp_path: Path, policy: Any) -> Any:
    runner = CampaignRunner(
        load_campaign(path), recorder, work_dir=tmp_path / "work", handle_signals=False, policy=policy
    )
    return runner.run()


def _results(ledger: Ledger, name: str) -> list[dict[str, Any]]:
    return [e for e in entries_of(ledger, "gate.result") if e["payload"]["gate"] == name]


def _job_end(ledger: Ledger) -> dict[str, Any]:
    (end,) = [j for j in entries_of(ledger, "job") if j["payload"]["state"] != "running"]
    return end


def _strict(tmp_path: Path, digest: str) -> Any:
    return _unreviewed(tmp_path, digest, benchmark_max='{ "ttft_ms.p95@c4" = 0.0001, "error_rate" = 0 }')


def test_a_failed_benchmark_the_store_could_not_keep_is_recorded_failed_not_not_run(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    policy = _strict(tmp_path, corpus[1])
    rec = _FillingStore(ledger, lambda name: name.startswith("benchmark-"))
    path = stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=("--ttft-ms", "5"))
    result = _run(path, rec, tmp_path, policy)  # no error: the run is recorded
    (bench,) = _results(ledger, "benchmark")
    p = bench["payload"]
    assert p["status"] == "failed" and "ttft_ms.p95@c4" in p["reason"], p["reason"]
    assert p["figures"].get("ttft_ms.p95@c4") is not None and p["counts"]["issued"] == 96 * 3 * 2
    # its artifacts by reference, and why
    assert {a["name"]: a.get("stored") for a in bench["artifacts"]} == {
        "benchmark-requests.jsonl": False,
        "benchmark-result.json": False,
    }
    assert all(a.get("digest", "").startswith("blake3:") for a in bench["artifacts"])
    assert NO_SPACE in p["bounds"]["artifacts_not_stored"]
    # the earlier harness, stored as usual
    (sem,) = _results(ledger, "semantic")
    assert sem["payload"]["status"] == "passed" and "artifacts_not_stored" not in sem["payload"]["bounds"]
    assert all(a.get("stored", True) for a in sem["artifacts"])
    # the job ends as its gates decided: no collector stop, nothing for a supersession to withdraw
    end = _job_end(ledger)
    assert end["payload"]["state"] == "failed"
    assert end["payload"]["reason"].startswith("gate benchmark failed: ")
    assert result.verdict_hint == "NOT QUALIFIED — PERFORMANCE"
    # the policy: not credited (its record cannot be read back), and its failure counts against the engine
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "NOT QUALIFIED — PERFORMANCE", v["gates"]
    (why,) = [r for r in v["rejected"] if r["entry"] == bench["id"]]
    assert why["rule"] == "harness-artifact-mismatch" and why["counts_against"] is True, why
    assert "recorded by reference only" in why["detail"]
    assert not [u for u in v["unjudged"] if u["kind"] == "job"], v["unjudged"]


def test_a_passed_harness_run_the_store_could_not_keep_is_credited_by_no_policy(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    policy = _unreviewed(tmp_path, corpus[1])
    rec = _FillingStore(ledger, lambda name: name.startswith(("semantic-", "benchmark-")))
    result = _run(stub_campaign(tmp_path, tiny_model_dir, corpus), rec, tmp_path, policy)
    for name in ("semantic", "benchmark"):
        (e,) = _results(ledger, name)
        assert e["payload"]["status"] == "passed" and e["payload"]["reason"] is None
        assert e["artifacts"] and all(a.get("stored") is False for a in e["artifacts"])
        assert NO_SPACE in e["payload"]["bounds"]["artifacts_not_stored"]
    # every step passed, but a pass no policy can read back is no pass to hint at
    assert [g.status for g in result.gates] == ["passed"] * 9
    assert result.verdict_hint == "INCONCLUSIVE"
    assert _job_end(ledger)["payload"]["state"] == "succeeded"
    v = evaluate(ledger, {"campaign": "harness"}, policy)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    (sem,) = [g for g in v["gates"] if g["name"] == "semantic"]
    assert sem["status"] == "missing"
    rules = {
        r["rule"] for r in v["rejected"] if r["entry"] in {e["id"] for e in entries_of(ledger, "gate.result")}
    }
    assert rules == {"harness-artifact-mismatch"}
    assert not any(r.get("counts_against") for r in v["rejected"] if r["rule"] == "harness-artifact-mismatch")


def test_a_harness_run_the_store_keeps_still_qualifies(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """The passing neighbour (and the check that ``_unreviewed`` judges a clean run QUALIFIED)."""
    policy = _unreviewed(tmp_path, corpus[1])
    result = _run(
        stub_campaign(tmp_path, tiny_model_dir, corpus),
        _FillingStore(ledger, lambda _n: False),
        tmp_path,
        policy,
    )
    assert result.verdict_hint == "QUALIFIED"
    for name in ("semantic", "benchmark"):
        (e,) = _results(ledger, name)
        assert "artifacts_not_stored" not in e["payload"]["bounds"]
        assert all(a.get("stored", True) for a in e["artifacts"])
    assert evaluate(ledger, {"campaign": "harness"}, policy)["verdict"] == "QUALIFIED"


def test_a_harness_result_the_ledger_refuses_is_never_recorded_not_run(
    tmp_path: Path,
    tiny_model_dir: Path,
    ledger: Ledger,
    corpus: tuple[Path, str],  # noqa: F811
) -> None:
    """The ledger refuses the benchmark's result itself: the job ends failed saying the run ran, what it
    showed and where its files are — never a ``not_run`` result that says it measured nothing."""
    policy = _strict(tmp_path, corpus[1])
    rec = _FillingStore(
        ledger,
        lambda _n: False,
        lambda kind, payload: kind == "gate.result" and payload.get("gate") == "benchmark",
    )
    path = stub_campaign(tmp_path, tiny_model_dir, corpus, stub_args=("--ttft-ms", "5"))
    with pytest.raises(StorageError):
        _run(path, rec, tmp_path, policy)
    assert _results(ledger, "benchmark") == []
    reason = _job_end(ledger)["payload"]["reason"]
    assert reason.startswith("the collector stopped during gate benchmark: no space left")
    assert "the benchmark run ran (failed: " in reason and "ttft_ms.p95@c4" in reason
    assert "its result could not be recorded" in reason and "not to be superseded" in reason
    assert str(tmp_path / "work" / "benchmark") in reason
    assert _job_end(ledger)["payload"]["state"] == "failed"


# --- the artifacts themselves (``_harness_artifacts``) ----------------------------------------------------


class _Store:
    def __init__(self, refuse: bool = True, refuse_reference: bool = False) -> None:
        self.refuse, self.refuse_reference = refuse, refuse_reference

    def artifact(self, name: str, path: Path, *, by_reference: bool = False, **_: Any) -> Any:
        if (by_reference and self.refuse_reference) or (not by_reference and self.refuse):
            raise StorageError(f"cannot store {name}: read-only")
        return {"name": name, "stored": not by_reference}


def _files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("benchmark-requests.jsonl", "benchmark-result.json"):
        (tmp_path / name).write_text("{}\n")
        out[name] = tmp_path / name
    return out


def test_harness_artifacts_the_store_refuses_are_referenced_and_named(tmp_path: Path) -> None:
    me = SimpleNamespace(rec=_Store())
    arts, why = CampaignRunner._harness_artifacts(me, _files(tmp_path), {})  # type: ignore[arg-type]
    assert [a["stored"] for a in arts] == [False, False]
    assert why is not None and "read-only" in why


def test_harness_artifacts_that_cannot_even_be_referenced_are_each_named(tmp_path: Path) -> None:
    me = SimpleNamespace(rec=_Store(refuse_reference=True))
    arts, why = CampaignRunner._harness_artifacts(me, _files(tmp_path), {})  # type: ignore[arg-type]
    assert arts == []
    assert why is not None and "benchmark-requests.jsonl" in why and "benchmark-result.json" in why


def test_harness_artifacts_the_store_keeps_say_nothing_of_it(tmp_path: Path) -> None:
    me = SimpleNamespace(rec=_Store(refuse=False))
    arts, why = CampaignRunner._harness_artifacts(me, _files(tmp_path), {})  # type: ignore[arg-type]
    assert [a["stored"] for a in arts] == [True, True] and why is None
