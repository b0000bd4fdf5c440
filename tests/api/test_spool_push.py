"""Remote collectors: entries and artifacts spooled while the server is down are delivered exactly once."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from ledger.collectors.remote import (
    LedgerClient,
    RemoteRecorder,
    Spool,
    SpoolTarget,
    make_recorder,
    push_spool,
    spool_bytes,
)
from ledger.errors import RoleError
from ledger.service import Ledger
from tests.api.conftest import BACKENDS, LEDGER_BIN, PgDatabases, free_port, make_deployment, start_server


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _collector_home(tmp_path: Path, server_ledger: Ledger) -> Ledger:
    """A GPU host's own home, whose key `gpu01` the server's ledger trusts as a collector."""
    home = Ledger.init(tmp_path / "gpu-host")
    home.new_key("gpu01", ["collector"])
    server_ledger.enrol_key("gpu01", home.signing_key("gpu01").public.b64, ["collector"])
    return home


def test_offline_spool_then_push_delivers_in_order_exactly_once(
    tmp_path: Path, backend: str, pg_databases: PgDatabases
) -> None:
    dep = make_deployment(backend, tmp_path / "server", pg_databases)
    host = _collector_home(tmp_path, dep.ledger)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "stderr.log"
    log.write_bytes(b"HW Exception by GPU node-1 reason GPU Hang\n" * 100)

    rec = make_recorder(host, "gpu01", server=url, token=dep.tokens["writer"])
    assert isinstance(rec, RemoteRecorder)
    subject = {"campaign": "strix-3053", "host": "strix"}
    art = rec.artifact("stderr.log", log)
    launch = rec.record(
        "engine.launch",
        subject,
        {
            "engine": "native",
            "command": ["./adapter"],
            "started_at": "2026-09-09T09:00:00Z",
            "ready": False,
            "exit_code": -6,
            "failure_signature": "gpu-hang",
        },
        artifacts=[art],
    )
    job = rec.record(
        "job", subject, {"job_id": "52d7df93", "state": "killed", "exit_code": 143}, refs=[("launch", launch)]
    )
    spool = Spool(host.home.spool_dir)
    assert len(spool.entry_files()) == 2
    assert len(spool.artifact_files()) == 1
    size_before = dep.ledger.size()

    server = start_server(dep.home, port=port)
    try:
        # the push is the CLI a collector host runs
        out = subprocess.run(
            [
                LEDGER_BIN,
                "push",
                "--home",
                str(host.home.path),
                "--server",
                url,
                "--token",
                dep.tokens["writer"],
                "--json",
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert '"delivered": 2' in out.stdout
        assert not spool.pending()
        assert dep.ledger.size() == size_before + 2
        got = [dep.ledger.get(launch), dep.ledger.get(job)]
        assert got[1].seq == got[0].seq + 1
        assert got[1].statement.refs[0].id == launch
        downloaded = httpx.get(
            f"{url}/v1/artifacts/{art.digest}", headers={"Authorization": f"Bearer {dep.tokens['reader']}"}
        )
        assert downloaded.content == log.read_bytes()

        # A push that died after the server stored the batch but before the spool was cleared re-sends it:
        spool.add_entry(got[0].envelope, launch, target=SpoolTarget.of(url))
        again = subprocess.run(
            [
                LEDGER_BIN,
                "push",
                "--home",
                str(host.home.path),
                "--server",
                url,
                "--token",
                dep.tokens["writer"],
                "--json",
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        assert again.returncode == 0, again.stderr
        assert '"duplicates": 1' in again.stdout
        assert dep.ledger.size() == size_before + 2  # recognised, never duplicated

        # Online, the recorder appends directly; a refusal is raised, not spooled.
        note = rec.record("note", subject, {"text": "restored"})
        assert dep.ledger.get(note).kind == "note"
        with pytest.raises(RoleError):
            rec.record("review", subject, {"result": "PASS"}, refs=[("reviews", note)])
        assert not spool.pending()
        report = subprocess.run(
            [LEDGER_BIN, "--home", str(dep.home), "verify"], check=False, capture_output=True, text=True
        )
        assert report.returncode == 0, report.stdout + report.stderr
    finally:
        server.stop()
        dep.ledger.close()


def test_push_with_nothing_reachable_keeps_the_spool(tmp_path: Path) -> None:
    host = Ledger.init(tmp_path / "gpu-host")
    host.new_key("gpu01", ["collector"])
    url = f"http://127.0.0.1:{free_port()}"
    rec = RemoteRecorder(host, "gpu01", server=url, token="elt_x")
    rec.record("note", {"campaign": "c"}, {"text": "offline"})
    out = subprocess.run(
        [LEDGER_BIN, "push", "--home", str(host.home.path), "--server", url, "--token", "elt_x"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "1 still spooled" in out.stdout
    assert len(Spool(host.home.spool_dir).entry_files()) == 1


def test_push_progress_counts_the_bytes_it_sends(tmp_path: Path) -> None:
    """`ledger push`'s bar is in bytes: artifact chunks as they go out, a held artifact at once, envelopes
    per delivered batch; the calls add up to what the spool held."""
    dep = make_deployment("sqlite", tmp_path / "server", None)
    host = _collector_home(tmp_path, dep.ledger)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    big = tmp_path / "engine.log"
    big.write_bytes(b"INFO vLLM engine step\n" * 120_000)  # ~2.6 MB: three upload chunks
    small = tmp_path / "probe.json"
    small.write_bytes(b'{"ok": true}\n')
    rec = make_recorder(host, "gpu01", server=url, token=dep.tokens["writer"])
    arts = [rec.artifact("engine.log", big), rec.artifact("probe.json", small)]
    rec.record("note", {"campaign": "bytes"}, {"text": "spooled"}, artifacts=arts)
    spool = Spool(host.home.spool_dir)
    envelope_bytes = sum(p.stat().st_size for p in spool.entry_files())
    total = spool_bytes(host)
    assert total == big.stat().st_size + small.stat().st_size + envelope_bytes

    server = start_server(dep.home, port=port)
    try:
        # the server already holds the small artifact: it is counted without being sent
        client = LedgerClient(url, dep.tokens["writer"])
        client.upload_file(small, arts[1].digest, small.stat().st_size)
        steps: list[int] = []
        report = push_spool(host, server=url, token=dep.tokens["writer"], progress=steps.append)
        client.close()
    finally:
        server.stop()
        dep.ledger.close()
    assert report.delivered == 1 and report.artifacts == 2
    assert sum(steps) == total
    assert all(n > 0 for n in steps)
    assert small.stat().st_size in steps  # the held artifact, at once
    assert envelope_bytes in steps  # the one batch of envelopes
    assert max(steps) <= 1024 * 1024 and len(steps) >= 5  # the big one in chunks, not in one step
    assert spool_bytes(host) == 0
