"""Audit 18, F1 and F2: which entries a verdict reads beside the subject's own (``snapshot._linked_rows``).

F1: what acts on an entry read with the subject — a supersession of a supersession, a review of a review, an
acceptance of either — is read with it whatever subject it carries, to a fixpoint: a second supersession
filed under another subject withdraws the first, and the failure the first withdrew counts again.

F2: an entry of another subject that one of the subject's entries merely refs (an acceptance filed under this
campaign deciding another campaign's launch) is no evidence for or against the subject: it is not read, nor
is what acts on it. A job so referenced stays context (`job-of-other-campaign`).

Every reader of the log gives the same set: the service's repository (both query plans, SQLite and
PostgreSQL), the read-only SQLite reader the CLI uses, and a bundle's rows."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger import repo as repo_mod
from ledger.bundle import create_bundle, verify_bundle
from ledger.canonical import canonical_bytes
from ledger.entries import parse_time
from ledger.hashing import blake3_hex
from ledger.home import Home
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change
from ledger.policy.snapshot import load_snapshot, read_snapshot_rows
from ledger.policy.verdict import evaluate
from ledger.reads import SqlitePolicyLedger
from ledger.service import Ledger
from tests.api.conftest import fresh_pg_database
from tests.policy.test_fail_closed import (
    KEYS,
    POLICY_DIR,
    SUBJECT,
    counted_against,
    entry,
    gates,
    qualified_entries,
    rejected,
    verdict_of,
)

NOT_QUALIFIED = "NOT QUALIFIED — RUNTIME RELIABILITY"
OWN: dict[str, Any] = {}  # the fixture's default subject: the evaluated campaign's
OTHER = {"campaign": "ops-notes"}  # another campaign, same backend, model and host
ELSEWHERE = {"campaign": "review-board", "backend": None, "model": None, "host": None}  # nothing in common
SUBJECTS = {"own": OWN, "other": OTHER, "elsewhere": ELSEWHERE}
LLAMA = {"campaign": "llama-lab", "backend": "llamacpp", "model": "tiny-gguf", "host": "lab-box-7"}
MORE_KEYS = {**KEYS, "reviewer2": ["reviewer"], "operator2": ["operator"]}


def _named(name: str, kind: str, key: str, at: str, subject: dict[str, Any], **item: Any) -> dict[str, Any]:
    out = {"name": name, "kind": kind, "key": key, "at": at, **item}
    if subject:
        out["subject"] = dict(subject)
    return out


def _failed_probe() -> dict[str, Any]:
    """The campaign's HTTP 500 completion probe: a failure that counts against the engine."""
    return _named(
        "bad-probe",
        "health.probe",
        "collector",
        "2026-09-10T10:03:00Z",
        OWN,
        refs={"job": "campaign-job"},
        payload={
            "endpoint": "/v1/chat/completions",
            "check": "completion",
            "ok": False,
            "http_status": 500,
            "expected": "READY",
            "text": "",
            "max_tokens": 8,
            "error": "HTTP 500",
        },
    )


def _supersession(name: str, target: str, key: str, at: str, subject: dict[str, Any]) -> dict[str, Any]:
    return _named(
        name,
        "supersession",
        key,
        at,
        subject,
        refs={"supersedes": target},
        payload={"reason": f"{name}: wrong"},
    )


def _review(
    name: str, target: str, key: str, at: str, subject: dict[str, Any], result: str
) -> dict[str, Any]:
    payload = {"result": result, "commit": "cafe" + "0" * 36}
    return _named(name, "review", key, at, subject, refs={"reviews": target}, payload=payload)


def _acceptance(
    name: str, target: str, key: str, at: str, subject: dict[str, Any], decision: str
) -> dict[str, Any]:
    payload = {"decision": decision, "reason": f"{name}: {decision}"}
    return _named(name, "acceptance", key, at, subject, refs={"subject": target}, payload=payload)


def _superseded_failure(*chain: dict[str, Any]) -> list[dict[str, Any]]:
    """The qualified campaign with its failed probe, and ``chain`` (supersessions …) after it."""
    return [*qualified_entries(), _failed_probe(), *chain]


def _sup_chain(subjects: tuple[str, ...]) -> list[dict[str, Any]]:
    """s1 supersedes the failed probe, s2 supersedes s1, s3 s2 … each under the subject named in turn, each
    signed by another key than the one before."""
    keys = ("reviewer", "operator", "reviewer2", "operator2")
    out = []
    for i, name in enumerate(subjects, 1):
        target = "bad-probe" if i == 1 else f"s{i - 1}"
        out.append(
            _supersession(f"s{i}", target, keys[(i - 1) % 4], f"2026-09-10T10:0{3 + i}:00Z", SUBJECTS[name])
        )
    return out


def _semantic_reviewed(r1: str, r2: str) -> list[dict[str, Any]]:
    """The semantic run's own review superseded; r1 (under ``r1``'s subject) PASSes the run, r2 FAILs r1."""
    return [
        *qualified_entries(),
        _supersession("sr", "semantic-review", "operator", "2026-09-10T10:46:00Z", OWN),
        _review("r1", "semantic", "reviewer", "2026-09-10T10:47:00Z", SUBJECTS[r1], "PASS"),
        _review("r2", "r1", "reviewer2", "2026-09-10T10:48:00Z", SUBJECTS[r2], "FAIL"),
    ]


def _other_campaigns_crash() -> list[dict[str, Any]]:
    """llama-lab's job and its crashed launch: another campaign, backend, model and host."""
    return [
        _named(
            "other-job",
            "job",
            "collector",
            "2026-09-10T10:05:00Z",
            LLAMA,
            payload={
                "job_id": "other-1",
                "state": "running",
                "started_at": "2026-09-10T10:05:00Z",
                "lease_seconds": 3600.0,
            },
        ),
        _named(
            "other-crash",
            "engine.launch",
            "collector",
            "2026-09-10T10:06:00Z",
            LLAMA,
            refs={"job": "other-job"},
            payload={
                "engine": "llamacpp",
                "command": ["llama-server"],
                "attempt": 1,
                "started_at": "2026-09-10T10:05:20Z",
                "ready": False,
                "exit_code": 1,
                "failure_signature": "engine-dead",
                "bindings": {"engine": "llamacpp"},
            },
        ),
    ]


def _f2(decision: str = "rejected") -> list[dict[str, Any]]:
    """An operator of this campaign records, under its subject, an acceptance of llama-lab's launch."""
    return [
        *qualified_entries(),
        *_other_campaigns_crash(),
        _acceptance("note", "other-crash", "operator", "2026-09-10T10:07:00Z", OWN, decision),
    ]


def _verdict(tmp_path: Path, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return verdict_of(tmp_path, entries, keys=MORE_KEYS)


@contextmanager
def _ledger(home: Path, entries: list[dict[str, Any]], database_url: str | None = None) -> Iterator[Any]:
    """A ledger holding ``entries`` (the fixture builder of ``verdict_of``); yields (ledger, names)."""
    ledger = Ledger.init(home, database_url=database_url, genesis_at=parse_time("2026-09-10T09:00:00Z"))
    try:
        spec = {"start": "2026-09-10T09:00:00Z", "keys": MORE_KEYS, "defaults": {"subject": SUBJECT}}
        b = _Builder(ledger, {**spec, "entries": entries}, POLICY_DIR)
        b.enrol_keys()
        b.add_all(entries)
        yield ledger, {n: e.entry_id for n, e in b.names.items()}
    finally:
        ledger.close()


def _read_names(ledger: Any, names: dict[str, str], subject: dict[str, str] | None = None) -> set[str]:
    """The fixture names of the entries a verdict of ``subject`` reads."""
    by_id = {i: n for n, i in names.items()}
    snap = load_snapshot(ledger, dict(subject or SUBJECT))
    return {by_id[e.id] for e in snap.entries if e.id in by_id}


# --- F1: supersessions and reviews of supersessions and reviews, under any subject --------------------------


def test_baseline_the_failed_probe_fails_runtime_reliability(tmp_path: Path) -> None:
    v = _verdict(tmp_path, _superseded_failure())
    assert v["verdict"] == NOT_QUALIFIED
    assert _verdict(tmp_path, _superseded_failure(*_sup_chain(("other",))))["verdict"] == "QUALIFIED"


@pytest.mark.parametrize(
    "subjects",
    [("own", "own"), ("other", "other"), ("elsewhere", "elsewhere"), ("own", "other"), ("other", "own")],
)
def test_f1_a_supersession_superseded_under_another_subject_withdraws_nothing(
    tmp_path: Path, subjects: tuple[str, str]
) -> None:
    """Audit 18 F1: s1 withdraws the campaign's HTTP 500 probe, s2 (another key) withdraws s1. Filed under
    another subject (`ledger supersede <s1>` copies s1's subject), s2 was never read: QUALIFIED."""
    v = _verdict(tmp_path, _superseded_failure(*_sup_chain(subjects)))
    assert v["verdict"] == NOT_QUALIFIED, subjects
    assert gates(v)["runtime-stability"] == "failed"
    assert rejected(v).get("s1") == "superseded"
    assert rejected(v).get("bad-probe") != "superseded"


@pytest.mark.parametrize(
    "subjects",
    [
        ("other", "other", "other"),
        ("own", "other", "own"),
        ("other", "own", "other"),
        ("elsewhere", "other", "elsewhere"),
    ],
)
def test_f1_a_chain_of_three_supersessions_is_read_to_its_end(
    tmp_path: Path, subjects: tuple[str, ...]
) -> None:
    """s3 withdraws s2, so s1 stands again and the probe is withdrawn: only a verdict that reads s3 (two
    steps from the campaign's entries) says QUALIFIED."""
    v = _verdict(tmp_path, _superseded_failure(*_sup_chain(subjects)))
    assert v["verdict"] == "QUALIFIED", subjects
    assert rejected(v)["bad-probe"] == "superseded"
    assert rejected(v)["s2"] == "superseded"


def test_f1_a_chain_of_four_supersessions_under_other_subjects(tmp_path: Path) -> None:
    v = _verdict(tmp_path, _superseded_failure(*_sup_chain(("other", "elsewhere", "other", "elsewhere"))))
    assert v["verdict"] == NOT_QUALIFIED
    assert rejected(v)["s3"] == "superseded"


@pytest.mark.parametrize(
    ("r1", "r2"), [("own", "own"), ("elsewhere", "elsewhere"), ("other", "other"), ("own", "elsewhere")]
)
def test_f1_part_b_a_review_failed_by_a_review_under_another_subject_credits_nothing(
    tmp_path: Path, r1: str, r2: str
) -> None:
    """Audit 18 F1 part B: r1 PASSes the semantic run, r2 FAILs r1; with r1 and r2 under subject
    review-board the verdict read r1 and not r2: QUALIFIED."""
    v = _verdict(tmp_path, _semantic_reviewed(r1, r2))
    assert v["verdict"] == "INCONCLUSIVE", (r1, r2)
    assert gates(v)["semantic"] == "missing"


def test_f1_a_review_pass_under_another_subject_still_credits_when_nothing_fails_it(tmp_path: Path) -> None:
    es = _semantic_reviewed("elsewhere", "elsewhere")
    es.remove(entry(es, "r2"))
    assert _verdict(tmp_path, es)["verdict"] == "QUALIFIED"


@pytest.mark.parametrize("subject", ["own", "other", "elsewhere"])
def test_f1_an_acceptance_under_another_subject_rejecting_a_supersession_restores_the_failure(
    tmp_path: Path, subject: str
) -> None:
    """A rejected supersession withdraws nothing — read two steps away from the probe, under any subject."""
    es = _superseded_failure(
        *_sup_chain(("elsewhere",)),
        _acceptance("a1", "s1", "operator", "2026-09-10T10:05:00Z", SUBJECTS[subject], "rejected"),
    )
    v = _verdict(tmp_path, es)
    assert v["verdict"] == NOT_QUALIFIED, subject
    assert rejected(v)["s1"] == "rejected-by-acceptance"


def test_f1_what_acts_on_another_subjects_launch_that_refs_this_campaigns_job_is_read(tmp_path: Path) -> None:
    """A crashed launch naming another campaign that refs this campaign's job is read with it and counts
    against the engine (`other-subject` withholds credit only); another key's supersession of it, under a
    third subject, withdraws it — and is read although it refs nothing of this campaign's directly."""
    crash = _other_campaigns_crash()[1]
    crash.update(name="stray-crash", subject=dict(OTHER), refs={"job": "campaign-job"})
    crash["payload"].update(engine="vllm", bindings={"engine": "vllm"})
    v = _verdict(tmp_path, [*qualified_entries(), crash])
    assert "stray-crash" in counted_against(v)
    assert v["verdict"] == NOT_QUALIFIED
    withdrawn = _supersession("sx", "stray-crash", "operator", "2026-09-10T10:08:00Z", ELSEWHERE)
    v = _verdict(tmp_path, [*qualified_entries(), crash, withdrawn])
    assert rejected(v)["stray-crash"] == "superseded"
    assert v["verdict"] == "QUALIFIED"


def test_f1_the_routing_check_refuses_once_a_supersession_under_another_subject_withdraws_the_first(
    tmp_path: Path,
) -> None:
    """The verdict recorded while s1 stood is QUALIFIED; s2 (under another subject) withdraws s1 later: the
    routing check's re-derived verdict reads s2 and refuses."""
    s1, s2 = _sup_chain(("other", "other"))
    s2["at"] = "2026-09-10T11:00:00Z"
    recorded = {
        "name": "verdict",
        "at": "2026-09-10T10:55:00Z",
        "record_verdict": {"subject": {"campaign": SUBJECT["campaign"]}, "key": "reviewer"},
    }
    deployment = {
        "host": SUBJECT["host"],
        "services": [
            {
                "engine": "vllm",
                "name": "n7",
                "model": SUBJECT["model"],
                "gpus": [0],
                "gpu_memory_utilization": 0.25,
            }
        ],
    }
    route = {k: SUBJECT[k] for k in ("backend", "model", "host")}
    policy = load_policy("routing-change", POLICY_DIR)
    now = parse_time("2026-09-10T11:30:00Z")
    for late, allowed in (([], True), ([s2], False)):
        with _ledger(tmp_path / f"home-{allowed}", _superseded_failure(s1, recorded, *late)) as (led, _):
            got = check_routing_change(led, policy, dict(route), deployment=deployment, now=now)
            assert got["allowed"] is allowed, got
            if not allowed:
                assert NOT_QUALIFIED in canonical_bytes(got).decode()


# --- F2: what the subject's entries merely ref is no evidence about it --------------------------------------


@pytest.mark.parametrize("decision", ["rejected", "accepted"])
def test_f2_another_campaigns_crash_an_acceptance_refs_is_no_evidence_against_this_one(
    tmp_path: Path, decision: str
) -> None:
    """Audit 18 F2: an acceptance filed under vllm-embed refs llama-lab's crashed launch on lab-box-7: the
    crash failed vllm-embed's runtime-stability (`rejected-by-acceptance … still evidence against the
    engine`; `accepted`: `other-subject`, "read only because it refs this subject's entries" — untrue)."""
    v = _verdict(tmp_path, _f2(decision))
    assert v["verdict"] == "QUALIFIED", v["gates"]
    assert gates(v)["runtime-stability"] == "passed"
    assert "other-crash" not in rejected(v)
    assert "other-crash" not in {v["_names"].get(i) for i in v["used"]}


@pytest.mark.parametrize(
    "acting",
    [
        _review("rv", "other-crash", "reviewer", "2026-09-10T10:07:00Z", OWN, "FAIL"),
        _review("rv", "other-crash", "reviewer", "2026-09-10T10:07:00Z", OWN, "PASS"),
        _supersession("rv", "other-crash", "operator", "2026-09-10T10:07:00Z", OWN),
        _acceptance("rv", "other-crash", "operator", "2026-09-10T10:07:00Z", OWN, "accepted"),
    ],
    ids=["review-fail", "review-pass", "supersession", "acceptance"],
)
def test_f2_whatever_this_campaign_files_about_another_campaigns_entry_reads_none_of_it(
    tmp_path: Path, acting: dict[str, Any]
) -> None:
    es = [*qualified_entries(), *_other_campaigns_crash(), acting]
    v = _verdict(tmp_path, es)
    assert v["verdict"] == "QUALIFIED", v["gates"]
    with _ledger(tmp_path / "home", es) as (led, names):
        read = _read_names(led, names)
    assert "rv" in read
    assert not read & {"other-crash", "other-job"}


def test_f2_another_campaigns_failed_semantic_run_this_campaign_reviews_is_not_its_result(
    tmp_path: Path,
) -> None:
    es = qualified_entries()
    theirs = {**entry(es, "semantic"), "name": "their-semantic", "subject": dict(OTHER)}
    theirs["payload"] = {**theirs["payload"], "status": "failed"}
    theirs["at"] = "2026-09-10T10:11:00Z"
    del theirs["refs"]  # (one that refs this campaign's job is read with it: `other-subject`, above)
    es += [theirs, _review("ours", "their-semantic", "reviewer", "2026-09-10T10:12:00Z", OWN, "PASS")]
    v = _verdict(tmp_path, es)
    assert v["verdict"] == "QUALIFIED", v["gates"]
    assert "their-semantic" not in rejected(v)


def test_f2_a_referrer_of_another_campaign_that_refs_nothing_of_this_one_is_not_read(tmp_path: Path) -> None:
    """llama-lab's own supersession and review of its crash ref only what this campaign's acceptance refs:
    none of them is read with this campaign — nor the crash itself, nor (at a later size) llama-lab's
    acceptance of the supersession."""
    es = [
        *_f2(),
        _supersession("their-sup", "other-crash", "operator2", "2026-09-10T10:08:00Z", LLAMA),
        _review("their-review", "other-crash", "reviewer2", "2026-09-10T10:09:00Z", LLAMA, "FAIL"),
        _acceptance("their-acc", "their-sup", "operator", "2026-09-10T10:10:00Z", LLAMA, "rejected"),
    ]
    with _ledger(tmp_path / "home", es) as (led, names):
        read = _read_names(led, names)
        assert "note" in read
        assert not read & {"other-crash", "other-job", "their-sup", "their-review", "their-acc"}
        assert evaluate(led, dict(SUBJECT), load_policy("backend-qualification", POLICY_DIR))["verdict"] == (
            "QUALIFIED"
        )
        # llama-lab's verdict reads them all, as before
        theirs = _read_names(led, names, LLAMA)
        assert {"other-crash", "other-job", "their-sup", "their-review", "their-acc", "note"} <= theirs


def test_f2_a_job_of_another_campaign_a_result_refs_is_still_read_as_context(tmp_path: Path) -> None:
    """The one thing a subject's entry refs that is read without being the subject's: a job, so that a
    result naming this campaign but another campaign's job as its own contradicts itself."""
    es = [*qualified_entries(), *_other_campaigns_crash()]
    entry(es, "other-job")["at"] = "2026-09-10T09:59:00Z"
    entry(es, "sequential")["refs"] = {"job": "other-job"}
    v = _verdict(tmp_path, es)
    assert rejected(v)["sequential"] == "job-of-other-campaign"
    assert v["verdict"] == "INCONCLUSIVE"
    with _ledger(tmp_path / "home", es) as (led, names):
        read = _read_names(led, names)
    assert "other-job" in read
    assert "other-crash" not in read


# --- every reader reads the same set ------------------------------------------------------------------------

CASES = {
    "f1": _superseded_failure(*_sup_chain(("other", "elsewhere"))),
    "f1-chain-of-3": _superseded_failure(*_sup_chain(("elsewhere", "other", "elsewhere"))),
    "f1-reviews": _semantic_reviewed("elsewhere", "elsewhere"),
    "f2": [
        *_f2(),
        _supersession("their-sup", "other-crash", "operator2", "2026-09-10T10:08:00Z", LLAMA),
    ],
}
EXPECTED = {
    "f1": NOT_QUALIFIED,
    "f1-chain-of-3": "QUALIFIED",
    "f1-reviews": "INCONCLUSIVE",
    "f2": "QUALIFIED",
}


def _rows(led: Any, subject: dict[str, str]) -> list[tuple[Any, ...]]:
    return [tuple(r[:5]) for r in read_snapshot_rows(led, subject).rows]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_reader_reads_the_same_linked_entries(tmp_path: Path, case: str, monkeypatch: Any) -> None:
    """The service's repository under both query plans, the CLI's read-only SQLite reader and a bundle's
    rows (verified offline, re-derived byte for byte) read the same entries and judge alike."""
    policy = load_policy("backend-qualification", POLICY_DIR)
    subjects = (dict(SUBJECT), {"campaign": SUBJECT["campaign"]})
    with _ledger(tmp_path / "home", CASES[case]) as (led, _names):
        for subject in subjects:
            plans = []
            for few in (True, False):
                monkeypatch.setattr(repo_mod, "_few_refs", lambda conn, n, few=few: few)
                plans.append(_rows(led, subject))
            monkeypatch.undo()
            assert plans[0] == plans[1]
            fast = SqlitePolicyLedger.open(Home(tmp_path / "home"))
            assert fast is not None
            try:
                assert _rows(fast, subject) == plans[0]
                live = evaluate(fast, subject, policy)
            finally:
                fast.close()
            assert live["verdict"] == EXPECTED[case]
            assert canonical_bytes(evaluate(led, subject, policy)) == canonical_bytes(live)
        buf = io.BytesIO()
        create_bundle(led, subjects[1], policy, buf)
        vkey = led.verifier_key()
    buf.seek(0)
    with zipfile.ZipFile(buf) as zf:
        made = zf.read("verdict.json")
    buf.seek(0)
    report = verify_bundle(buf, public_key=vkey)
    assert report.problems == []
    assert report.rederived_digest == report.result_digest == "blake3:" + blake3_hex(made)


@pytest.mark.postgres
@pytest.mark.parametrize("case", sorted(CASES))
def test_postgresql_reads_the_same_linked_entries(tmp_path: Path, case: str) -> None:
    """The same cases on PostgreSQL (the plan that probes the refs' target index): fails in CI without the
    server, skips elsewhere."""
    policy = load_policy("backend-qualification", POLICY_DIR)
    with _ledger(tmp_path / "sqlite", CASES[case]) as (led, names):
        want = _read_names(led, names)
    with fresh_pg_database() as url, _ledger(tmp_path / "pg", CASES[case], url) as (led, names):
        assert led.engine.dialect.name == "postgresql"
        assert _read_names(led, names) == want
        assert evaluate(led, dict(SUBJECT), policy)["verdict"] == EXPECTED[case]
