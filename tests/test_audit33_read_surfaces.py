"""Audit 33: the log's read surfaces on a corrupted database and on bad input files.

- f3: a row deleted behind the log's back makes the checkpoint, tile, entry-bundle and proof reads fail as
  the server's corruption (``chain-broken``, HTTP 500, "run `ledger verify`"), not as the client's request
  (422 "check the request against /openapi.json"), nor "not … yet" (404) for a bundle below the size.
- f5: ``ledger tiles export`` and ``/tile/entries`` refuse a log record that does not hash to its leaf.
- f6b: ``ledger proof consistency -- -1 5`` refuses the negative size as such.
- f7: a file that is not UTF-8 is one ``error[…]`` line naming it (exit 2), never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledger.api.errors import status_for
from ledger.cli import main
from ledger.errors import ChainBrokenError, LedgerError
from ledger.service import Ledger
from tests.conftest import CliResult
from tests.test_routing_committed_record import _drop_triggers


@pytest.fixture
def led(tmp_path: Path) -> Iterator[Ledger]:
    Ledger.init(tmp_path / "home").close()
    led = Ledger.open(tmp_path / "home", home_bound=True)
    led.new_key("op", ["operator"])
    for i in range(4):
        led.record("note", {"campaign": "c"}, {"text": f"n{i}"}, key="op")
    try:
        yield led
    finally:
        led.close()


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., CliResult]:
    monkeypatch.setenv("COLUMNS", "200")

    def go(*args: str) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return go


def _tamper(led: Ledger, sql: str, params: dict[str, Any]) -> None:
    with led.engine.begin() as conn:
        _drop_triggers(conn)
        conn.execute(sa.text(sql), params)


def _refused_as_corruption(call: Callable[[], Any]) -> ChainBrokenError:
    with pytest.raises(ChainBrokenError) as e:
        call()
    assert status_for(e.value) == 500
    return e.value


def test_a_deleted_row_is_the_servers_corruption_not_the_clients_request(led: Ledger) -> None:
    size = led.size()
    _tamper(led, "DELETE FROM log_entries WHERE seq = 3", {})
    for call in (
        led.signed_checkpoint,
        lambda: led.tile(0, 0, size),
        lambda: led.consistency(1, size),
        lambda: led.entry_bundle(0, size),
    ):
        err = _refused_as_corruption(call)
        assert "deleted behind the log's back" in err.message, err.message


def test_an_entry_bundle_past_the_log_is_still_not_found(led: Ledger) -> None:
    with pytest.raises(LedgerError) as e:
        led.entry_bundle(0, led.size() + 1)
    assert e.value.code == "entry-not-found" and status_for(e.value) == 404


def _edit_newest_record(led: Ledger) -> int:
    with led.engine.begin() as conn:
        seq, rec = conn.execute(
            sa.text("SELECT seq, record FROM log_entries ORDER BY seq DESC LIMIT 1")
        ).one()
        doc = json.loads(bytes(rec))
        doc["logged_at"] = "2026-01-01T00:00:00.000000Z"
        _drop_triggers(conn)
        conn.execute(
            sa.text("UPDATE log_entries SET record = :r WHERE seq = :s"),
            {"r": json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(), "s": seq},
        )
    return int(seq)


def test_tiles_export_refuses_a_record_that_is_not_its_leaf(led: Ledger, tmp_path: Path, run: Any) -> None:
    seq = _edit_newest_record(led)
    r = run("--home", str(led.home.path), "tiles", "export", str(tmp_path / "pub"))
    assert r.code == 2 and "error[chain-broken]" in r.err and f"seq {seq}" in r.err, r.out + r.err
    assert not (tmp_path / "pub" / "checkpoint").exists()
    err = _refused_as_corruption(lambda: led.entry_bundle(0, led.size()))
    assert f"seq {seq}" in err.message


@pytest.mark.parametrize(("old", "new"), [("-1", "5"), ("1", "-5")])
def test_proof_consistency_refuses_a_negative_size(led: Ledger, run: Any, old: str, new: str) -> None:
    r = run("--home", str(led.home.path), "proof", "consistency", "--", old, new)
    assert r.code == 2 and "error[bad-input]" in r.err and "non-negative" in r.err, r.err
    assert "entries; no checkpoint" not in r.err


BAD = b"evidence-ledger/x\n1\n\xff\xfe\n\n"


def test_non_utf8_files_are_one_error_line_naming_them(led: Ledger, tmp_path: Path, run: Any) -> None:
    home = str(led.home.path)
    bad = tmp_path / "bad.cp"
    bad.write_bytes(BAD)
    entry = led.query(kind="note", limit=1)[0]
    proof = tmp_path / "proof.json"
    proof.write_text(json.dumps(led.inclusion(entry.entry_id)))
    vkey = led.log_public_key().b64
    for args in (
        ("verify", "--from", str(bad)),
        ("proof", "verify", str(proof), "--public-key", vkey, "--checkpoint", str(bad)),
        ("proof", "verify", str(proof), "--public-key", f"@{bad}"),
    ):
        r = run("--home", home, *args)
        assert r.code == 2 and "error[bad-input]" in r.err and str(bad) in r.err, (args, r.err)
        assert "not UTF-8" in r.err and "Traceback" not in r.err
    with (led.home.path / "receipts.jsonl").open("ab") as f:
        f.write(b"\xff\n")
    r = run("--home", home, "audit")
    assert r.code == 2 and "error[bad-config]" in r.err and "receipts.jsonl:" in r.err, r.err
