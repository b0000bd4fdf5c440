"""`ledger verdict` and `ledger check routing-change` on a SQLite home read through
``ledger.reads.SqlitePolicyLedger`` (stdlib sqlite3, no SQLAlchemy, no service) for a fast start (issue 11's
benchmark). Its reads must be ``ledger.repo.LogRepo``'s, row for row, and every verdict and routing check of
the policy fixtures must come out byte-identical through both paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger import reads
from ledger.canonical import canonical_bytes
from ledger.entries import parse_time
from ledger.errors import LedgerError
from ledger.home import Home
from ledger.policy import evaluate, load_policy
from ledger.policy.fixtures import build_fixture_ledger, discover_fixtures
from ledger.policy.routing import check_routing_change
from ledger.policy.snapshot import clear_caches
from ledger.reads import SqlitePolicyLedger
from ledger.service import Ledger
from tests.policy.conftest import count_snapshot_reads

FIXTURES = discover_fixtures()
HEAVY = (
    "fastapi",
    "uvicorn",
    "starlette",
    "sqlmodel",
    "sqlalchemy",
    "alembic",
    "ledger.service",
    "ledger.db",
)


def _outcome(call: Any) -> bytes:
    """The canonical bytes of a result, or of the error it raised (both paths must fail alike)."""
    clear_caches()  # each path computes: nothing is served from the other's remembered result
    try:
        return b"ok " + canonical_bytes(call())
    except LedgerError as e:
        return b"error " + canonical_bytes(e.to_dict())


@pytest.mark.parametrize("path", FIXTURES, ids=[f"{p.parent.name}/{p.stem}" for p in FIXTURES])
def test_fixture_verdicts_and_checks_are_byte_identical_through_both_paths(
    path: Path, tmp_path: Path
) -> None:
    ledger, spec, builder = build_fixture_ledger(path, tmp_path / "home", init=Ledger.init)
    fast = SqlitePolicyLedger.open(Home(tmp_path / "home"))
    assert fast is not None
    compared = 0
    try:
        for v in spec.get("verdicts", []):
            policy = load_policy(v.get("policy") or "backend-qualification")
            size = builder.names[v["after"]].seq + 1 if "after" in v else None
            subject = dict(v.get("subject") or spec.get("defaults", {}).get("subject", {}))
            for at in {size, None}:

                def judge(led: Any, at: int | None = at, subject: Any = subject, policy: Any = policy) -> Any:
                    return evaluate(led, subject, policy, at_size=at)

                slow = _outcome(lambda: judge(ledger))
                quick = _outcome(lambda: judge(fast))
                assert quick == slow, (path.name, subject, at)
                compared += 1
        for c in spec.get("checks", []):
            policy = load_policy(c.get("policy", "routing-change"))

            def check(led: Any, c: dict[str, Any] = c, policy: Any = policy) -> dict[str, Any]:
                return check_routing_change(
                    led,
                    policy,
                    dict(c["subject"]),
                    action=c.get("action", "route"),
                    deployment=c.get("deployment"),
                    now=parse_time(c["now"]),
                )

            assert _outcome(lambda: check(fast)) == _outcome(lambda: check(ledger)), (path.name, c)
            compared += 1
    finally:
        fast.close()
        ledger.close()
    assert compared


def test_the_policy_reads_return_the_rows_of_the_service_repo(tmp_path: Path, monkeypatch: Any) -> None:
    path = next(p for p in FIXTURES if p.stem == "seed004-sleeping")
    ledger, spec, builder = build_fixture_ledger(path, tmp_path / "home", init=Ledger.init)
    fast = SqlitePolicyLedger.open(Home(tmp_path / "home"))
    assert fast is not None
    slow_repo, quick_repo = ledger.repo, fast.repo
    n = ledger.size()
    subject = dict(spec["defaults"]["subject"])
    try:
        with slow_repo.read() as sc, quick_repo.read() as qc:
            for sub in (subject, {"campaign": subject["campaign"]}, {"host": "nowhere"}):
                for size in (1, n // 2, n):
                    own = slow_repo.subject_rows(sc, sub, size)
                    assert quick_repo.subject_rows(qc, sub, size) == own
                    for count in (len(own), 0):  # both query plans
                        assert sorted(quick_repo.linked_rows(qc, sub, size, count)) == sorted(
                            slow_repo.linked_rows(sc, sub, size, count)
                        )
                    seqs = [r[0] for r in own[:3]]
                    for among in (None, [], ["x"], slow_repo.kind_hosts(sc, ["host.probe"], size)):
                        assert quick_repo.subject_hosts(
                            qc, sub, size, seqs, among
                        ) == slow_repo.subject_hosts(sc, sub, size, seqs, among)
                    for kinds in (["health.probe", "verdict", "host.probe"], ["host.probe"], ["verdict"]):
                        every = slow_repo.subject_kind_rows(sc, sub, kinds, size)
                        for rare in (0, 1, 4096, 10**9):  # every plan of the policy reader's
                            monkeypatch.setattr(reads, "RARE_ROWS", rare)
                            assert quick_repo.subject_kind_rows(qc, sub, kinds, size) == every
                            for since in sorted({r[4] for r in every} | {"2000-01-01T00:00:00.000000Z"}):
                                later = [r for r in every if r[4] >= since]  # column 4: the log's logged_at
                                for repo, conn in ((slow_repo, sc), (quick_repo, qc)):
                                    got = repo.subject_kind_rows(conn, sub, kinds, size, logged_since=since)
                                    assert got == later
            for size in (1, n):
                for kinds in (["kernel.log"], ["host.probe", "note"], []):
                    assert quick_repo.kind_hosts(qc, kinds, size) == slow_repo.kind_hosts(sc, kinds, size)
                    hosts = [*slow_repo.kind_hosts(sc, ["host.probe"], n), "x"]
                    assert sorted(quick_repo.host_rows(qc, kinds, hosts, size)) == sorted(
                        slow_repo.host_rows(sc, kinds, hosts, size)
                    )
                assert quick_repo.logged_at(qc, size - 1) == slow_repo.logged_at(sc, size - 1)
                assert quick_repo.checkpoint_root(size, qc) == slow_repo.checkpoint_root(size, sc)
        assert fast.size() == ledger.size()
        for size in (1, n // 2, n, None):
            quick_ring, slow_ring = fast.keyring(at_size=size), ledger.keyring(at_size=size)
            assert quick_ring.seq == slow_ring.seq
            assert {k: r.to_json() for k, r in quick_ring.keys.items()} == {
                k: r.to_json() for k, r in slow_ring.keys.items()
            }
            assert fast.signed_checkpoint(size=size).root == ledger.signed_checkpoint(size=size).root
        for e in builder.names.values():
            assert fast.referrers(e.entry_id) == ledger.referrers(e.entry_id)
            assert fast.get(e.entry_id) == ledger.get(e.entry_id)
    finally:
        fast.close()
        ledger.close()


def _modules_loaded(home: Path, *args: str, modules: tuple[str, ...] = HEAVY) -> list[str]:
    code = (
        "import sys\n"
        "from ledger.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        f"heavy = sorted(m for m in {modules!r} if m in sys.modules)\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
        "raise SystemExit(0 if rc in (0, 1) else rc)\n"
    )
    env = {**os.environ, "LEDGER_HOME": str(home)}
    p = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stderr.splitlines() if x.startswith("HEAVY="))
    return [m for m in line.removeprefix("HEAVY=").split(",") if m]


def test_verdict_and_routing_check_start_without_the_orm_or_the_service(tmp_path: Path) -> None:
    """Regression (issue 11 benchmark: a fresh `ledger verdict` spent half its start importing SQLAlchemy
    and the service)."""
    path = next(p for p in FIXTURES if p.stem == "seed004-sleeping")
    ledger, spec, _ = build_fixture_ledger(path, tmp_path / "home", init=Ledger.init)
    ledger.close()
    home = tmp_path / "home"
    campaign = spec["defaults"]["subject"]["campaign"]
    assert _modules_loaded(home, "verdict", "-s", f"campaign={campaign}", "--json") == []
    assert _modules_loaded(home, "verdict", "-s", f"campaign={campaign}") == []
    route = ["check", "routing-change", "-s", "backend=b", "-s", "model=m", "-s", "host=h", "--json"]
    assert _modules_loaded(home, *route) == []
    # the check can fail: recording goes through the service, which loads them
    assert "sqlalchemy" in _modules_loaded(home, "verdict", "-s", f"campaign={campaign}", "--record")


def test_json_verdicts_and_routing_checks_start_without_rich(tmp_path: Path) -> None:
    """Regression (issue 11 benchmark: ~15 ms of every fresh `ledger verdict --json` / `ledger check
    routing-change --json`, what CI pipelines run, went to importing Rich for output they never print):
    the consoles are made on first use; the human output still has them."""
    path = next(p for p in FIXTURES if p.stem == "seed004-sleeping")
    ledger, spec, _ = build_fixture_ledger(path, tmp_path / "home", init=Ledger.init)
    ledger.close()
    home = tmp_path / "home"
    campaign = spec["defaults"]["subject"]["campaign"]
    rich = ("rich",)
    assert _modules_loaded(home, "verdict", "-s", f"campaign={campaign}", "--json", modules=rich) == []
    route = ["check", "routing-change", "-s", "backend=b", "-s", "model=m", "-s", "host=h"]
    assert _modules_loaded(home, *route, "--json", modules=rich) == []
    assert _modules_loaded(home, "verdict", "-s", f"campaign={campaign}", modules=rich) == ["rich"]
    assert _modules_loaded(home, *route, modules=rich) == ["rich"]


# --- a warm read-only ledger remembers its reads while the database is unchanged (data_version) ----------


def _tampered_copy(b: Any) -> tuple[Any, str]:
    """The envelope of the entry named ``health-while-sleeping``, edited as an attacker with the database
    would: the payload hides the sleeping engine, the old signature is kept."""
    import base64
    import json

    target = b.ledger.get(b.names["health-while-sleeping"])
    env = json.loads(target.envelope)
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["payload"]["sleeping"] = False
    env["payload"] = base64.b64encode(canonical_bytes(statement)).decode()
    return env, target.entry_id


def test_a_row_edited_by_raw_sql_is_not_served_from_a_warm_read_only_ledger(build, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Regression (issue 11 warm path): the evaluation's key is remembered by SQLite's data_version; an
    envelope edited by raw SQL on another connection changes it, so the remembered verdict is not
    returned — the edited row is read, misses every cache and fails its signature."""
    from tests.policy.test_verdict_caches import _tamper

    b = build("backend-qualification/seed004-sleeping.toml")
    fast = SqlitePolicyLedger.open(Home(b.home))
    assert fast is not None
    policy = load_policy("backend-qualification")
    subject = {"campaign": "router-ocr"}
    try:
        before = evaluate(fast, subject, policy)
        reads = count_snapshot_reads(monkeypatch)
        again = evaluate(fast, subject, policy)
        assert canonical_bytes(again) == canonical_bytes(before)
        assert reads == [], "an unchanged database is not read again"

        env, entry_id = _tampered_copy(b)
        assert entry_id in before["used"]
        edited = _tamper(b.home, b.ledger.get(entry_id).seq, env)  # the thorough forger: id, record, leaf
        after = evaluate(fast, subject, policy)
        assert reads == [1], "the edit changed data_version: the rows were read again"
        rejected = {r["entry"]: r for r in after["rejected"]}
        assert rejected[edited]["rule"] == "bad-signature"
        assert edited not in after["used"]
        assert after["checkpoint"]["size"] == before["checkpoint"]["size"]
    finally:
        fast.close()


def test_an_append_by_the_service_flips_a_warm_read_only_routing_check(build) -> None:
    """The service appends on its own connection (same process): data_version moves, nothing stale."""
    from tests.policy.test_routing_current import NOW, OK, SUBJECT, supersede_benchmark

    b = build("routing-change/seed004-router.toml")
    fast = SqlitePolicyLedger.open(Home(b.home))
    assert fast is not None
    policy = load_policy("routing-change")
    try:
        assert check_routing_change(fast, policy, dict(SUBJECT), deployment=OK, now=NOW)["allowed"] is True
        assert check_routing_change(fast, policy, dict(SUBJECT), deployment=OK, now=NOW)["allowed"] is True
        supersede_benchmark(b)
        r = check_routing_change(fast, policy, dict(SUBJECT), deployment=OK, now=NOW)
        assert r["allowed"] is False
        assert r["verdict"]["current"]["verdict"] == "INCONCLUSIVE"
        assert r["checkpoint"]["size"] == b.ledger.size()
    finally:
        fast.close()


def test_the_service_evaluates_through_its_thread_s_reader_and_a_supersession_flips_it(build) -> None:
    """The API's path: `Ledger.check_routing` on a SQLite home reads through this thread's read-only
    policy ledger (warm reads remembered), and a supersession the same service appends flips it at once."""
    from tests.policy.test_routing_current import NOW, OK, SUBJECT, supersede_benchmark

    b = build("routing-change/seed004-router.toml")
    led = b.ledger
    assert isinstance(led._policy_reads(), SqlitePolicyLedger)
    first = led.check_routing(dict(SUBJECT), deployment=OK, now=NOW)
    assert first["allowed"] is True
    assert led.check_routing(dict(SUBJECT), deployment=OK, now=NOW) == first  # warm
    supersede_benchmark(b)
    r = led.check_routing(dict(SUBJECT), deployment=OK, now=NOW)
    assert r["allowed"] is False
    assert r["verdict"]["current"]["verdict"] == "INCONCLUSIVE"
