"""Issue 12, fix 81 f2 (audit 72): ``ledger audit --server A`` against a server that refuses to sign its log
(500 ``log-inconsistent``) named as lost by A every entry the home had sent to another server B: the audit
(``audit_refusing_server``) checked the receipts of every log but the home's own.

Now only the receipts of A's log are judged: the log pinned for A (``--public-key``, or the key the home
recorded for A: ``log_key(..., first_use=False)``, passed by ``audit_report``), its receipts' signatures
checked; receipts of other logs are set aside, counted by origin, as ``audit_server`` does. Without a key,
the one log other than the home's own is A's; with several, which is A's cannot be told and that is said
(``receipts-unchecked``), none named lost. The summary's origin and newest index are A's log's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.log import verifier_key
from ledger.proofs import RECEIPTS_UNCHECKED, UNKNOWN_LOG, AuditReport, audit_refusing_server
from ledger.service import Ledger

ADMIN = "admin"
A_URL = "http://a.test:8080"
REFUSAL = "server answered 500: [log-inconsistent] the log (size 4) does not extend the checkpoint it holds"


@pytest.fixture(autouse=True)
def _no_timed_publication(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_CHECKPOINT_INTERVAL", "3600")


class Logs:
    """Three logs' receipts kept in one home: server A's (4 received, the last 2 lost by A), server B's (3),
    and the home's own (``gpu``, 1), each with its first entry's too; and a log C the home keeps none of."""

    def __init__(self, root: Path) -> None:
        self.led = {n: Ledger.init(root / n, home_bound=True) for n in ("a", "b", "gpu", "c")}
        for name, n in (("a", 4), ("b", 3), ("gpu", 1)):
            for i in range(n):
                self.led[name].record("note", {"campaign": name}, {"text": f"{name} {i}"}, key=ADMIN)
        self.kept = {n: self.led[n].home.receipts() for n in ("a", "b", "gpu")}
        a_ids = [str(r["entry_id"]) for r in self.kept["a"]]
        self.a_lost = a_ids[-2:]
        self.a_shown = set(a_ids[:-2])

    def origin(self, name: str) -> str:
        return self.led[name].origin

    def vkey(self, name: str) -> str:
        return verifier_key(self.origin(name), self.led[name].log_public_key())

    def b64(self, name: str) -> str:
        return self.led[name].log_public_key().b64

    def receipts(self, *names: str) -> list[dict[str, Any]]:
        return [r for n in names for r in self.kept[n]]

    def shown(self, entry_id: str) -> dict[str, Any] | None:
        """What server A shows of an entry (``GET /v1/entries/{id}``): its entries but the 2 lost."""
        return {"id": entry_id} if entry_id in self.a_shown else None

    def audit(self, receipts: list[dict[str, Any]], key: str | None) -> AuditReport:
        return audit_refusing_server(
            receipts, server=A_URL, refusal=REFUSAL, own_origin=self.origin("gpu"), shown=self.shown,
            public_key=key,
        )  # fmt: skip

    def close(self) -> None:
        for led in self.led.values():
            led.close()


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Logs]:
    out = Logs(tmp_path)
    yield out
    out.close()


def _codes(report: AuditReport) -> list[tuple[str | None, str]]:
    return [(p["entry_id"], p["code"]) for p in report.problems]


def _lost(report: AuditReport) -> list[str]:
    return [p["entry_id"] for p in report.problems if p["code"] == "receipt-mismatch"]


@pytest.mark.parametrize("key", ["vkey", "b64"])
def test_refusing_server_audit_blames_it_for_another_servers_entries(logs: Logs, key: str) -> None:
    """The pinned key (the one recorded for A, or --public-key) says which receipts are A's."""
    receipts = logs.receipts("gpu", "a", "b")
    report = logs.audit(receipts, logs.vkey("a") if key == "vkey" else logs.b64("a"))
    assert _codes(report) == [(None, "log-inconsistent")] + [(e, "receipt-mismatch") for e in logs.a_lost]
    assert report.origin == logs.origin("a")
    assert report.receipts == len(logs.kept["a"])
    assert report.newest_index == max(int(r["index"]) for r in logs.kept["a"])
    assert report.other_origins == {
        logs.origin("b"): len(logs.kept["b"]),
        logs.origin("gpu"): len(logs.kept["gpu"]),
    }
    assert report.other_logs == len(logs.kept["b"]) + len(logs.kept["gpu"])
    assert not report


@pytest.mark.parametrize("order", ["a-first", "b-first"])
def test_refusing_server_audit_receipts_reordered_blame_the_same(logs: Logs, order: str) -> None:
    """Neighbour: the receipts in another order (B's before A's, interleaved) judge the same entries."""
    names = ("a", "b", "gpu") if order == "a-first" else ("b", "gpu", "a")
    receipts = logs.receipts(*names)
    if order == "b-first":
        receipts = receipts[::2] + receipts[1::2]
    report = logs.audit(receipts, logs.vkey("a"))
    assert sorted(_lost(report)) == sorted(logs.a_lost)
    assert report.origin == logs.origin("a")


def test_refusing_server_audit_without_a_key_takes_the_one_other_log(logs: Logs) -> None:
    """No key known, the home keeps receipts of one log but its own: that log is A's."""
    report = logs.audit(logs.receipts("gpu", "a"), None)
    assert _lost(report) == logs.a_lost
    assert report.origin == logs.origin("a")
    assert report.newest_index == max(int(r["index"]) for r in logs.kept["a"])
    assert report.other_origins == {logs.origin("gpu"): len(logs.kept["gpu"])}


def test_refusing_server_audit_without_a_key_and_several_logs_cannot_tell(logs: Logs) -> None:
    """No key known and receipts of A's and B's logs: which is A's cannot be told; none is blamed on A."""
    report = logs.audit(logs.receipts("gpu", "a", "b"), None)
    assert _codes(report) == [(None, "log-inconsistent"), (None, RECEIPTS_UNCHECKED)]
    assert "which is its log cannot be told" in report.problems[1]["message"]
    assert report.origin == UNKNOWN_LOG and report.receipts == 0 and report.newest_index is None
    assert report.other_logs == len(logs.receipts("gpu", "a", "b"))


@pytest.mark.parametrize("key", ["vkey", "b64"])
def test_refusing_server_audit_with_a_key_of_no_log_kept_blames_none(logs: Logs, key: str) -> None:
    """The key pinned for the server is a log the home keeps no receipt of: nothing checked, said so."""
    report = logs.audit(logs.receipts("gpu", "a", "b"), logs.vkey("c") if key == "vkey" else logs.b64("c"))
    assert _codes(report) == [(None, "log-inconsistent"), (None, RECEIPTS_UNCHECKED)]
    assert report.origin == (logs.origin("c") if key == "vkey" else UNKNOWN_LOG)
    assert report.receipts == 0


def test_refusing_server_audit_of_a_receipt_renamed_to_its_log_is_not_a_loss(logs: Logs) -> None:
    """Neighbour: a B receipt whose unsigned JSON origin (and entry id) was renamed to A's log is judged as
    A's (never set aside unseen) but is not one A's key signed: that is its problem, not a loss."""
    forged = copy.deepcopy(logs.kept["b"][0])
    forged["origin"] = logs.origin("a")
    forged["entry_id"] = logs.a_lost[0]
    report = logs.audit([*logs.receipts("a"), forged], logs.vkey("a"))
    bad = [p for p in report.problems if p["entry_id"] == logs.kept["b"][0]["entry_id"]]
    assert [p["code"] for p in bad] == ["proof-invalid"], report.problems
    assert bad[0]["message"].startswith("the receipt is not one this log signed"), bad
    assert _lost(report) == logs.a_lost


def test_refusing_server_audit_of_a_receipt_with_its_note_dropped_is_not_set_aside(logs: Logs) -> None:
    """Neighbour: a receipt whose signed note was dropped, naming no log, is checked (and refused) with the
    pinned key, never taken as A's loss nor set aside unseen."""
    dropped = {k: v for k, v in logs.kept["a"][0].items() if k not in ("note", "origin")}
    report = logs.audit([dropped, *logs.receipts("a")], logs.vkey("a"))
    eid = dropped["entry_id"]
    refused = [p for p in report.problems if p["entry_id"] == eid]
    assert [p["code"] for p in refused] == ["proof-invalid"], report.problems
    assert _lost(report) == logs.a_lost  # the intact receipt of that entry still judged (shown: no loss)
    assert report.receipts == len(logs.kept["a"]) + 1 and report.other_logs == 0
