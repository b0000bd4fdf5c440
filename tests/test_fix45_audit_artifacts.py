"""`ledger audit --server`: an artifact a received entry names that the server no longer serves is a problem,
artifact-missing (audit 37 f3) — the operator deleted the collector's uploaded bytes from the store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.remote import served_log
from ledger.errors import RemoteUnavailableError
from ledger.proofs import AuditReport, audit_server
from ledger.service import Ledger
from tests.collectors.test_fix45_spool_targets import A, Server, _recorder


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[Ledger, Ledger]]:
    server = Ledger.init(tmp_path / "server")
    host = Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    server.enrol_key("gpu01", host.signing_key("gpu01").public.b64, ["collector"])
    yield server, host
    host.close()
    server.close()


def _collect(
    server: Ledger, host: Ledger, tmp_path: Path, texts: list[bytes], by_reference: bool = False
) -> list[Any]:
    """One entry per text, each with that text as its kernel.log artifact, recorded on the server."""
    rec = _recorder(host, Server(server, A))
    refs = []
    for i, text in enumerate(texts):
        log = tmp_path / f"k{i}.log"
        log.write_bytes(text)
        art = rec.artifact("kernel.log", log, by_reference=by_reference)
        rec.record("note", {"campaign": "c1"}, {"text": f"#{i}"}, artifacts=[art])
        refs.append(art)
    return refs


def _audit(server: Ledger, host: Ledger, served: Callable[[str], bool] | None) -> AuditReport:
    client = Server(server, A)
    origin, vkey = served_log(client.checkpoint())
    return audit_server(
        host.home.receipts(),
        client.inclusion,
        server=A,
        served_origin=origin,
        served_vkey=vkey,
        public_key=vkey,
        own_origin=host.origin,
        artifact_served=served,
    )


def _delete(server: Ledger, digest: str) -> None:
    hexd = digest.split(":", 1)[1]
    gone = [p for p in (server.home_path / "store").rglob(f"{hexd}*") if p.is_file()]
    assert gone
    for p in gone:
        p.unlink()


class Asked:
    """The server's HEAD, counted."""

    def __init__(self, server: Ledger) -> None:
        self.server = server
        self.digests: list[str] = []

    def __call__(self, digest: str) -> bool:
        self.digests.append(digest)
        return self.server.has_artifact(digest)


def test_artifact_deleted_from_the_servers_store_is_artifact_missing_in_the_collectors_audit(
    logs: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    server, host = logs
    [art] = _collect(server, host, tmp_path, [b"NVRM: Xid 79\n"])
    assert _audit(server, host, Asked(server))  # the neighbour: all served, ok
    _delete(server, art.digest)
    report = _audit(server, host, Asked(server))
    assert not report
    [p] = report.problems
    assert p["code"] == "artifact-missing" and art.digest in p["message"] and p["entry_id"]


def test_each_distinct_artifact_is_asked_once_and_named_for_every_entry_naming_it(
    logs: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    server, host = logs
    arts = _collect(server, host, tmp_path, [b"same bytes\n", b"same bytes\n", b"other\n"])
    _delete(server, arts[0].digest)
    asked = Asked(server)
    report = _audit(server, host, asked)
    assert sorted(asked.digests) == sorted({a.digest for a in arts})  # one HEAD per distinct digest
    missing = [p for p in report.problems if p["code"] == "artifact-missing"]
    assert len(missing) == 2 and len({p["entry_id"] for p in missing}) == 2
    assert all(arts[0].digest in p["message"] for p in missing)


def test_artifact_recorded_by_reference_only_is_not_asked_for(
    logs: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    server, host = logs
    _collect(server, host, tmp_path, [b"kept on the host\n"], by_reference=True)
    asked = Asked(server)
    assert _audit(server, host, asked) and asked.digests == []


def test_server_that_cannot_answer_for_an_artifact_is_a_problem_not_ok(
    logs: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    server, host = logs
    [art] = _collect(server, host, tmp_path, [b"NVRM: Xid 79\n"])

    def down(_digest: str) -> bool:
        raise RemoteUnavailableError("cannot reach http://prod.test: connection reset")

    report = _audit(server, host, down)
    [p] = report.problems
    assert p["code"] == "server-unreachable" and art.digest in p["message"]


def test_audit_without_the_servers_artifact_call_checks_receipts_only(
    logs: tuple[Ledger, Ledger], tmp_path: Path
) -> None:
    """The neighbour: no ``artifact_served`` (a caller that cannot ask): receipts are checked as before."""
    server, host = logs
    [art] = _collect(server, host, tmp_path, [b"NVRM: Xid 79\n"])
    _delete(server, art.digest)
    assert _audit(server, host, None)
