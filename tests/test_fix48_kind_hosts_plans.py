"""Fix 48 (performance): a cold `check routing-change` at 200k entries spent ~0.9 s in ``kind_hosts`` (the
join walked every host entry from the subjects' side to find a kind's handful) and 170 ms in
``subject_kind_rows`` with an empty subject (SQLite walked the rowid range for 4 rows). The SQLite reader
(``ledger.reads.SqlitePolicyRepo``) now lets the kinds' index drive where their rows are few, and else asks
each distinct host value whether it has an entry of the kinds. The rows must be the ones the service repo
(``ledger.repo.LogRepo``: the old SQL) returns, on every plan, on a home with several host spellings and
kinds."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import reads
from ledger.entries import format_time, parse_time
from ledger.home import Home
from ledger.policy.fixtures import build_fixture_ledger
from ledger.reads import SqlitePolicyLedger
from ledger.service import Ledger
from tests.policy.conftest import FIXTURES, POLICY_DIR

SPELLINGS = ["gpu-box-1", "GPU-BOX-1", "gpu-box-1.", "other-box", "Other-Box"]
KERNEL = {"source": "dmesg", "events": [{"time": "2026-09-10T12:00:00Z", "kind": "nvrm-xid", "xid": 13,
                                         "device": "PCI:0000:3b:00", "message": "NVRM: Xid 13"}]}  # fmt: skip
HEALTH = {"endpoint": "/health", "check": "health", "ok": True, "http_status": 200}


@pytest.fixture
def homes(tmp_path: Path) -> Any:
    """The seed-004 routing fixture, then notes, kernel logs and health probes under several spellings of
    two hosts (each kind under some spellings only), one minute apart."""
    ledger, _spec, _b = build_fixture_ledger(
        FIXTURES / "routing-change/seed004-router.toml", tmp_path / "home", POLICY_DIR, init=Ledger.init
    )
    at = parse_time("2026-09-10T12:00:00Z")
    plan = [
        ("note", {"text": "p2p looks fine"}, SPELLINGS),
        ("kernel.log", KERNEL, SPELLINGS[1:3]),
        ("health.probe", HEALTH, SPELLINGS[::2]),
    ]
    for kind, payload, hosts in plan:
        for h in hosts:
            subject = {"host": h} if kind != "health.probe" else {"host": h, "backend": "vllm", "model": "m"}
            st = ledger.make_statement(kind, subject, payload, collected_at=format_time(at))
            ledger.append([ledger.sign(st, "collector" if kind != "note" else "operator")], logged_at=at)
            at += timedelta(minutes=1)
    fast = SqlitePolicyLedger.open(Home(tmp_path / "home"))
    assert fast is not None
    yield ledger, fast
    fast.close()
    ledger.close()


KINDS = [
    ("kernel.log", "host.probe", "note"),
    ("health.probe",),
    ("routing.change",),
    ("verdict", "health.probe"),
    ("job", "engine.launch", "verdict"),
    (),
]


def test_kind_hosts_on_the_sqlite_reader_returns_the_service_repos_hosts_on_every_plan(
    homes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, fast = homes
    n = ledger.size()
    with ledger.repo.read() as sc, fast.repo.read() as qc:
        seen: set[str] = set()
        for size in (1, n // 2, n - 3, n):
            for kinds in KINDS:
                old = ledger.repo.kind_hosts(sc, list(kinds), size)
                # the hosts by brute force: every entry below size of these kinds
                brute = sorted(
                    {str(e.statement.subject["host"]) for e in ledger.query(limit=10**6)
                     if e.seq < size and e.kind in kinds and "host" in e.statement.subject}
                )  # fmt: skip
                assert old == brute, (kinds, size)
                for rare in (0, 1, 2, 4096, 10**9):  # both plans (the kinds' index; each host value)
                    monkeypatch.setattr(reads, "RARE_ROWS", rare)
                    assert fast.repo.kind_hosts(qc, list(kinds), size) == old, (kinds, size, rare)
                seen.update(old)
    assert {"GPU-BOX-1", "gpu-box-1.", "Other-Box", "other-box", "gpu-box-1"} <= seen


def test_subject_kind_rows_with_an_empty_subject_returns_the_service_repos_rows_on_every_plan(
    homes: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, fast = homes
    n = ledger.size()
    with ledger.repo.read() as sc, fast.repo.read() as qc:
        for kinds in KINDS[:-1]:
            for subject in ({}, {"host": "GPU-BOX-1"}):
                every = ledger.repo.subject_kind_rows(sc, subject, list(kinds), n)
                times = sorted(
                    {r[4] for r in every} | {"2000-01-01T00:00:00.000000Z", "2099-01-01T00:00:00Z"}
                )
                for rare in (0, 1, 2, 4096, 10**9):
                    monkeypatch.setattr(reads, "RARE_ROWS", rare)
                    assert fast.repo.subject_kind_rows(qc, subject, list(kinds), n) == every
                    for since in times:
                        old = ledger.repo.subject_kind_rows(sc, subject, list(kinds), n, logged_since=since)
                        assert old == [r for r in every if r[4] >= since]
                        got = fast.repo.subject_kind_rows(qc, subject, list(kinds), n, logged_since=since)
                        assert got == old, (kinds, subject, rare, since)
