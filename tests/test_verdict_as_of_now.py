"""`ledger verdict --now T` judges the log as it stood at T.

Found by an audit: every entry of a campaign was logged 10:00–10:50, yet `verdict --now 10:05` answered
QUALIFIED on the whole log — crediting semantic, benchmark, review and acceptance entries the log took after
10:05 — and `--now` before the first entry answered too. Now the entries the log took after T are not read
(the log's clock never runs back: a bisection on log times), `--at` past them is an error naming the first,
and a time before every entry is an error."""

from __future__ import annotations

import json
from pathlib import Path

from tests.policy.test_fail_closed import SUBJECT, qualified_entries
from tests.test_routing_at_reference_time import _campaign_home

SUBJ = ["--subject", f"campaign={SUBJECT['campaign']}"]


def _home(tmp_path: Path) -> Path:
    home, ledger, _ = _campaign_home(tmp_path, qualified_entries())
    ledger.close()
    return home


def test_verdict_now_before_the_evidence_was_logged_does_not_credit_it(tmp_path: Path, cli) -> None:
    home = _home(tmp_path)
    whole = json.loads(cli("verdict", "--home", str(home), *SUBJ, "--json").out)
    assert whole["verdict"] == "QUALIFIED"
    r = cli("verdict", "--home", str(home), *SUBJ, "--now", "2026-09-10T10:05:00Z", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["verdict"] == "INCONCLUSIVE", out["gates"]
    assert out["checkpoint"]["size"] < whole["checkpoint"]["size"]
    statuses = {g["name"]: g["status"] for g in out["gates"]}
    assert statuses["host-prerequisites"] == "passed"  # logged 10:00:05: read
    # the semantic result (10:10) and everything after were not in the log at 10:05
    assert not any(u in out["used"] for u in whole["used"][-4:])
    # at the last entry's time the whole log is read: the same answer as without --now
    r = cli("verdict", "--home", str(home), *SUBJ, "--now", "2026-09-10T10:50:00Z", "--json")
    assert json.loads(r.out)["checkpoint"]["size"] == whole["checkpoint"]["size"]


def test_verdict_now_before_every_entry_is_an_error(tmp_path: Path, cli) -> None:
    home = _home(tmp_path)
    r = cli("verdict", "--home", str(home), *SUBJ, "--now", "2020-01-01T00:00:00Z")
    assert r.code == 2, r.out + r.err
    assert "holds no entry logged at or before 2020-01-01T00:00:00" in r.err, r.err


def test_verdict_at_a_size_reading_past_now_is_an_error(tmp_path: Path, cli) -> None:
    home = _home(tmp_path)
    whole = json.loads(cli("verdict", "--home", str(home), *SUBJ, "--json").out)
    size = whole["checkpoint"]["size"]
    r = cli("verdict", "--home", str(home), *SUBJ, "--at", str(size), "--now", "2026-09-10T10:05:00Z")
    assert r.code == 2, r.out + r.err
    assert f"--at {size} reads entries logged after --now 2026-09-10T10:05:00" in r.err, r.err
    # a size within the log as it stood then is read as asked
    r = cli("verdict", "--home", str(home), *SUBJ, "--at", "8", "--now", "2026-09-10T10:05:00Z", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["checkpoint"]["size"] == 8
