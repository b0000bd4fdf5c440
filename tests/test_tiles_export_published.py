"""`ledger tiles export DIR`: the folder's published checkpoint moves only forward, to a log that extends it.

Found by an audit: after the operator deleted the log's last entries with raw SQL (triggers dropped) and
appended others, a re-export into the published folder exited 0 and replaced its signed checkpoint with one
of the fork — the folder is the log's publication point (a CDN serves it), and HOME/checkpoint already refuses
exactly this. Now the folder's checkpoint must be this log's, no larger than the size exported, and its root
must still be the log's at its size; otherwise exit 2 and nothing is written (`--force` replaces it)."""

from __future__ import annotations

from pathlib import Path

from ledger.service import Ledger
from tests.test_tamper import raw


def _notes(ledger: Ledger, n: int, text: str = "note") -> None:
    for i in range(n):
        ledger.record("note", {"campaign": "tiles"}, {"text": f"{text} {i}"}, key="hostA")


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _fork(ledger: Ledger, keep: int) -> None:
    """The operator's rewrite: every entry from seq ``keep`` on deleted behind the log's back, with its
    checkpoints, and the home's held checkpoint removed (so appends go on)."""
    conn = raw(ledger)
    for t in ("entry_subjects", "entry_refs", "entry_artifacts"):
        conn.execute(f"DELETE FROM {t} WHERE seq >= ?", (keep,))
    conn.execute("DELETE FROM log_entries WHERE seq >= ?", (keep,))
    conn.execute("DELETE FROM checkpoints WHERE size > ?", (keep,))
    conn.execute("DELETE FROM tiles")  # rebuilt from the leaves
    conn.commit()
    conn.close()
    (ledger.home.path / "checkpoint").unlink(missing_ok=True)


def _published(ledger: Ledger, cli, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:  # type: ignore[no-untyped-def]
    """A log of a few entries exported to ``cdn``: the folder and what it publishes."""
    ledger.new_key("hostA", ["collector"])
    _notes(ledger, 5)
    out = tmp_path / "cdn"
    assert cli("tiles", "export", str(out)).code == 0
    return out, _files(out)


def test_a_re_export_of_a_rewritten_log_does_not_replace_the_published_checkpoint(
    ledger: Ledger, cli, tmp_path: Path
) -> None:
    out, published = _published(ledger, cli, tmp_path)
    size = ledger.size()
    _fork(ledger, size - 2)
    ledger.close()
    led = Ledger.open(ledger.home.path)
    _notes(led, 4, "forked")
    led.close()
    r = cli("tiles", "export", str(out))
    assert r.code == 2, r.out + r.err
    assert f"the log does not extend the checkpoint {out / 'checkpoint'} publishes (size {size}" in r.err
    assert _files(out) == published, "nothing is written"
    # the operator may still replace it, saying so
    r = cli("tiles", "export", str(out), "--force")
    assert r.code == 0, r.err
    assert (out / "checkpoint").read_bytes() != published["checkpoint"]


def test_an_export_of_a_smaller_size_does_not_move_the_published_checkpoint_back(
    ledger: Ledger, cli, tmp_path: Path
) -> None:
    out, published = _published(ledger, cli, tmp_path)
    r = cli("tiles", "export", str(out), "--size", "3")
    assert r.code == 2, r.out + r.err
    assert "would move the published checkpoint back" in r.err, r.err
    assert _files(out) == published
    # forward is fine: the same log, grown
    _notes(ledger, 2, "more")
    r = cli("tiles", "export", str(out), "--json")
    assert r.code == 0, r.err and r.json()["size"] == ledger.size()


def test_a_folder_publishing_another_logs_checkpoint_is_refused(ledger: Ledger, cli, tmp_path: Path) -> None:
    other = Ledger.init(tmp_path / "other-home")
    other.new_key("hostA", ["collector"])
    _notes(other, 3)
    out = tmp_path / "cdn"
    other.export_tiles(out)
    other.close()
    published = _files(out)
    ledger.new_key("hostA", ["collector"])
    r = cli("tiles", "export", str(out))
    assert r.code == 2, r.out + r.err
    assert "is not a checkpoint of this log" in r.err, r.err
    assert _files(out) == published
    (out / "checkpoint").write_text("not a note\n")
    r = cli("tiles", "export", str(out))
    assert r.code == 2 and "is not a checkpoint of this log" in r.err, r.err
