"""Crash consistency over HTTP: kill -9 a client mid batch-append, the server mid-append, `ledger push`.

After every kill: no partial artifact is visible, the chain has no gap or fork, every entry (and artifact)
whose request got a 2xx is present, batches are whole, and a spool is delivered exactly once, in order.
``API_CRASH_TRIALS`` scales the counts (default 70 client kills, 5+5 server kills, 16 push kills);
``CRASH_SEED`` replays a run; ``RELIABILITY_REPORT=FILE`` appends the figures as JSON lines.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.collectors.remote import Spool
from ledger.hashing import blake3_hex, parse_digest
from ledger.service import Ledger
from tests.reliability import api_fixtures
from tests.reliability.api_fixtures import (
    Deployment,
    PgDatabases,
    Server,
    collector_home,
    make_deployment,
    start_server,
    verify_json,
)
from tests.reliability.conftest import ForkServer, LogWatch

pg_databases = api_fixtures.pg_databases
SCALE = float(os.environ.get("API_CRASH_TRIALS", "100")) / 100
KB = 1024

# A client that knows nothing of the ledger: it POSTs pre-signed batches in chunks over a raw socket and
# prints every entry id of a batch once the server answered 2xx (then flushes), like a careful collector.
_CLIENT = r"""
import http.client, json, os, sys, time
host, port, token, batch_dir, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
for name in sorted(os.listdir(batch_dir)):
    body = open(os.path.join(batch_dir, name), "rb").read()
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.putrequest("POST", "/v1/entries/batch")
    conn.putheader("Authorization", "Bearer " + token)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    for i in range(0, len(body), 16384):
        conn.send(body[i:i + 16384])
        time.sleep(0.0005)
    resp = conn.getresponse()
    data = resp.read()
    if 200 <= resp.status < 300:
        ids = [e["id"] for e in json.loads(data)["items"]]
        os.write(fd, ("ok %s %s\n" % (name, " ".join(ids))).encode())
    else:
        why = data[:200].decode(errors="replace")
        os.write(fd, ("refused %s %d %s\n" % (name, resp.status, why)).encode())
    conn.close()
"""


def _seed() -> int:
    seed = int(os.environ.get("CRASH_SEED", str(random.randrange(1 << 32))))
    print(f"CRASH_SEED={seed}")
    return seed


def _report(name: str, figures: dict[str, Any]) -> None:
    path = os.environ.get("RELIABILITY_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": name, **figures}) + "\n")
    print(name, json.dumps(figures))


def _sign_batch(dep: Deployment, tag: str, k: int, pad: int) -> list[dict[str, Any]]:
    led = dep.ledger
    key = led.signing_key("collector1")
    return [
        led.sign(
            led.make_statement(
                "note", {"campaign": "api-crash", "batch": tag}, {"text": f"{tag} {i + 1}/{k} " + "x" * pad}
            ),
            key,
        ).to_json()
        for i in range(k)
    ]


class _Batches:
    """Entries seen per batch tag, counted incrementally from the log's new rows."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}
        self.seen: Counter[str] = Counter()
        self.next_seq = 0

    def check_whole(self, ledger: Ledger) -> int:
        """Every batch with any entry in the log has all of them (appends over HTTP are all-or-nothing)."""
        new = ledger.query(subject={"campaign": "api-crash"}, after_seq=self.next_seq - 1, limit=None)
        for e in new:
            self.seen[e.statement.subject["batch"]] += 1
            self.next_seq = e.seq + 1
        for tag, n in self.seen.items():
            assert n == self.sizes[tag], (
                f"batch {tag}: {n} of {self.sizes[tag]} entries visible (a torn batch)"
            )
        return len(self.seen)


def _final_verify(dep: Deployment, watch: LogWatch) -> dict[str, Any]:
    watch.check(dep.ledger, full=True)
    code, doc = verify_json(dep.home)
    assert code == 0 and doc["ok"], doc
    assert doc["size"] == len(watch.ids)
    return doc


# --- kill -9 the client mid batch-append ---------------------------------------------------------------


@pytest.mark.slow
def test_kill9_client_mid_batch_append_over_http(tmp_path: Path) -> None:
    rng = random.Random(_seed())
    trials = max(1, round(70 * SCALE))
    dep = make_deployment("sqlite", tmp_path / "server", None)
    server = start_server(dep.home)
    port = int(server.url.rsplit(":", 1)[1])
    client = tmp_path / "client.py"
    client.write_text(_CLIENT)
    watch = LogWatch()
    watch.check(dep.ledger, full=True)
    batches = _Batches()
    sizes = batches.sizes
    reported: list[str] = []
    killed = finished = refused = 0
    try:
        for t in range(trials):
            bdir = tmp_path / f"b{t}"
            bdir.mkdir()
            for b in range(6):
                tag = f"c{t}-{b}"
                # mostly small batches; now and then a large body (~1 MiB) so kills land mid-upload
                k, pad = (rng.randint(1, 30), rng.randint(0, 1500)) if rng.random() < 0.8 else (120, 8000)
                sizes[tag] = k
                (bdir / f"{b:02d}-{tag}").write_bytes(
                    json.dumps({"envelopes": _sign_batch(dep, tag, k, pad)}).encode()
                )
            out = tmp_path / f"c{t}.out"
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(client),
                    "127.0.0.1",
                    str(port),
                    dep.tokens["writer"],
                    str(bdir),
                    str(out),
                ]
            )
            time.sleep(rng.uniform(0.03, 0.35))
            proc.kill()
            proc.wait()
            finished += proc.returncode == 0
            killed += proc.returncode != 0
            # A kill can land while the client writes its report: only whole lines were reported.
            text = out.read_text() if out.exists() else ""
            lines = text[: text.rfind("\n") + 1].splitlines()
            for line in lines:
                word, _name, *rest = line.split(" ")
                if word == "refused":
                    refused += 1
                    continue
                reported.extend(rest)
            watch.check(dep.ledger)
            for entry_id in (x for line in lines if line.startswith("ok ") for x in line.split()[2:]):
                assert dep.ledger.get(entry_id).entry_id == entry_id  # a 2xx'd entry was lost
            batches.check_whole(dep.ledger)
        assert refused == 0, "a valid batch was refused"
        time.sleep(0.5)  # let the server finish a body it had fully received
        whole = batches.check_whole(dep.ledger)
        doc = _final_verify(dep, watch)
        for entry_id in reported:
            dep.ledger.get(entry_id)
        _report(
            "api-client-kill",
            {"trials": trials, "killed": killed, "finished": finished, "reported_entries": len(reported),
             "batches_visible": whole, "batches_sent_or_not": len(sizes), "final_size": doc["size"]},
        )  # fmt: skip
    finally:
        server.stop()
        dep.ledger.close()


# --- kill -9 the server mid batch-append and mid artifact upload --------------------------------------


@dataclass
class _Load:
    """Writers that run until the server dies, remembering what got a 2xx."""

    dep: Deployment
    url: str
    rng: random.Random
    trial: int
    sizes: dict[str, int]
    entries_ok: list[str] = field(default_factory=list)
    artifacts_ok: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def appender(self, n: int) -> None:
        with httpx.Client(
            base_url=self.url, timeout=30, headers=api_fixtures.auth(self.dep.tokens["writer"])
        ) as c:
            for b in range(10_000):
                tag = f"s{self.trial}-{n}-{b}"
                k = self.rng.randint(1, 40)
                self.sizes[tag] = k
                try:
                    r = c.post("/v1/entries/batch", json={"envelopes": _sign_batch(self.dep, tag, k, 200)})
                except httpx.TransportError:
                    return
                if r.status_code >= 300:
                    self.errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                self.entries_ok.extend(e["id"] for e in r.json()["items"])

    def uploader(self) -> None:
        with httpx.Client(
            base_url=self.url, timeout=30, headers=api_fixtures.auth(self.dep.tokens["writer"])
        ) as c:
            for _ in range(10_000):
                data = self.rng.randbytes(self.rng.randint(64 * KB, 6 * 1024 * KB))
                digest = f"blake3:{blake3_hex(data)}"
                try:
                    r = c.put(f"/v1/artifacts/{digest}", content=data)
                except httpx.TransportError:
                    return
                if r.status_code >= 300:
                    self.errors.append(f"{r.status_code} {r.text[:200]}")
                    return
                self.artifacts_ok.append(digest)


@pytest.mark.slow
@pytest.mark.parametrize("backend", api_fixtures.BACKENDS)
def test_kill9_server_mid_append_and_upload(tmp_path: Path, backend: str, pg_databases: PgDatabases) -> None:
    rng = random.Random(_seed())
    trials = max(1, round(5 * SCALE))
    dep = make_deployment(backend, tmp_path / "server", pg_databases)
    watch = LogWatch()
    watch.check(dep.ledger, full=True)
    batches = _Batches()
    sizes = batches.sizes
    entries_ok: list[str] = []
    artifacts_ok: list[str] = []
    server: Server | None = None
    try:
        for t in range(trials):
            server = start_server(dep.home)
            load = _Load(dep, server.url, random.Random(rng.random()), t, sizes)
            threads = [threading.Thread(target=load.appender, args=(n,)) for n in range(2)]
            threads.append(threading.Thread(target=load.uploader))
            for th in threads:
                th.start()
            time.sleep(rng.uniform(0.2, 1.5))
            server.proc.kill()
            server.proc.wait()
            for th in threads:
                th.join(timeout=60)
            assert not load.errors, load.errors
            entries_ok += load.entries_ok
            artifacts_ok += load.artifacts_ok
            watch.check(dep.ledger)
            watch.check_store(dep.ledger)
            for entry_id in load.entries_ok:
                dep.ledger.get(entry_id)
            for digest in load.artifacts_ok:
                dep.ledger.store.verify(parse_digest(digest))
            batches.check_whole(dep.ledger)
        server = start_server(dep.home)  # it comes back up and takes appends again
        r = httpx.post(
            server.url + "/v1/entries/batch",
            json={"envelopes": _sign_batch(dep, "after", 3, 0)},
            headers=api_fixtures.auth(dep.tokens["writer"]),
        )
        assert r.status_code == 201, r.text
        sizes["after"] = 3
        batches.check_whole(dep.ledger)
        doc = _final_verify(dep, watch)
        _report(
            f"api-server-kill-{backend}",
            {"trials": trials, "entries_2xx": len(entries_ok), "artifacts_2xx": len(artifacts_ok),
             "final_size": doc["size"], "incoming_left": watch.incoming_left},
        )  # fmt: skip
    finally:
        if server is not None:
            server.stop()
        dep.ledger.close()


# --- kill -9 `ledger push` mid-delivery of a spool ---------------------------------------------------------


def _spool_more(host: Ledger, spool: Spool, n: int, start: int, rng: random.Random) -> list[str]:
    """Spool ``n`` signed notes and 0-2 artifacts, as a collector cut off from its server does.

    Entry files are written directly in the spool's documented layout (``entries/<order>-<id>.json``)
    without the per-file fsync of ``Spool.add_entry``: that is setup, not the code under test. They name no
    server (no ``.target`` beside them, as an older ledger spooled them): the push adopts them.
    """
    key = host.signing_key("gpu01")
    files = spool.entry_files()
    order = int(files[-1].name.split("-", 1)[0]) + 1 if files else 1
    spool.entries_dir.mkdir(parents=True, exist_ok=True)
    ids = []
    for i in range(start, start + n):
        st = host.make_statement(
            "note", {"campaign": "api-crash-push"}, {"text": f"#{i} " + "y" * rng.randint(0, 3000)}
        )
        env = host.sign(st, key).canonical()
        entry_id = blake3_hex(env)
        (spool.entries_dir / f"{order:012d}-{entry_id}.json").write_bytes(env)
        order += 1
        ids.append(entry_id)
    for _ in range(rng.randint(0, 2)):
        art = host.home.path / f"art-{start}.bin"
        art.write_bytes(rng.randbytes(rng.randint(256 * KB, 4 * 1024 * KB)))
        spool.add_artifact(art, parse_digest(f"blake3:{blake3_hex(art.read_bytes())}"), target=None)
    return ids


class _Delivered:
    """The collector's entries on the server, in log order, read incrementally."""

    def __init__(self, dep: Deployment, host: Ledger) -> None:
        self.dep = dep
        self.signer = host.signing_key("gpu01").key_id
        self.ids: list[str] = []
        self.next_seq = 0

    def read(self) -> list[str]:
        for e in self.dep.ledger.query(signer=self.signer, after_seq=self.next_seq - 1, limit=None):
            self.ids.append(e.entry_id)
            self.next_seq = e.seq + 1
        return self.ids


@pytest.mark.slow
def test_kill9_push_mid_delivery_delivers_exactly_once(tmp_path: Path, forkserver: ForkServer) -> None:
    rng = random.Random(_seed())
    trials = max(1, round(16 * SCALE))
    dep = make_deployment("sqlite", tmp_path / "server", None)
    host = collector_home(tmp_path / "gpu-host", dep.ledger)
    spool = Spool(host.home.spool_dir)
    server = start_server(dep.home)
    watch = LogWatch()
    watch.check(dep.ledger, full=True)
    spooled: list[str] = []
    argv = [
        "--home",
        str(host.home.path),
        "push",
        "--adopt-untargeted",
        "--server",
        server.url,
        "--token",
        dep.tokens["writer"],
        "--json",
    ]
    killed = 0
    delivered = _Delivered(dep, host)
    try:
        for t in range(trials):
            if len(spool.entry_files()) < 400:
                spooled += _spool_more(host, spool, rng.randint(400, 900), len(spooled), rng)
            trial = forkserver.start({"op": "cli", "argv": argv, "out": str(tmp_path / f"push{t}.out")})
            time.sleep(rng.uniform(0.05, 0.7))
            reaped = forkserver.kill_and_reap(trial)
            killed += reaped["signal"] == 9
            assert reaped["signal"] == 9 or reaped["code"] == 0, reaped
            watch.check(dep.ledger)
            watch.check_store(dep.ledger)
            on_server = delivered.read()
            still = {p.name.split("-", 1)[1].removesuffix(".json") for p in spool.entry_files()}
            on_set = set(on_server)
            assert len(on_server) == len(on_set), "an entry was delivered twice"
            lost = [i for i in spooled if i not in still and i not in on_set]
            assert not lost, f"{len(lost)} entries left the spool without reaching the server"
            # delivered in the order they were recorded: what is on the server is a prefix of the spool order
            assert on_server == spooled[: len(on_server)], "spooled entries were delivered out of order"
        time.sleep(0.3)
        trial = forkserver.start({"op": "cli", "argv": argv, "out": str(tmp_path / "final.out")})
        reaped = forkserver.reap(trial)
        assert reaped["code"] == 0, (tmp_path / "final.out.err").read_text()
        report = json.loads((tmp_path / "final.out").read_text())
        assert report["remaining"] == 0 and not spool.pending()
        assert delivered.read() == spooled, "after the last push every spooled entry is there once, in order"
        doc = _final_verify(dep, watch)
        _report(
            "api-push-kill",
            {"trials": trials, "killed_mid_push": killed, "spooled": len(spooled), "final_size": doc["size"],
             "final_push": report},
        )  # fmt: skip
    finally:
        server.stop()
        dep.ledger.close()
