"""`ledger --home X CMD` reads X, whatever LEDGER_HOME says.

Regression: the sub-commands' own `--home` option took its default from LEDGER_HOME, which shadowed the
root's `ledger --home X`: `verdict`, `check routing-change` and `bundle create` answered for the ledger
LEDGER_HOME named — the production gate allowed a route the named ledger refuses. LEDGER_HOME is now read
once (``ledger.home.resolve_home``), after both options.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.policy.test_fail_closed import qualified_entries
from tests.test_routing_at_reference_time import CAMPAIGN, _campaign_home


def test_the_root_home_option_beats_ledger_home(tmp_path: Path, cli: Any, home: Path) -> None:
    (tmp_path / "named").mkdir()
    named, ledger, _b = _campaign_home(tmp_path / "named", qualified_entries())
    size = ledger.size()
    ledger.close()
    assert named != home  # LEDGER_HOME (the `cli` fixture's home) names another, empty ledger
    subject = f"campaign={CAMPAIGN['campaign']}"
    r = cli("--home", str(named), "verdict", "-s", subject, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["verdict"] == "QUALIFIED"
    dep = tmp_path / "dep.json"
    dep.write_text(
        json.dumps(
            {"host": "gpu-box-1", "services": [{"engine": "vllm", "name": "s", "model": "m-7", "gpus": [0]}]}
        )
    )
    route = [f"{k}={CAMPAIGN[k]}" for k in ("backend", "model", "host")]
    args = ["check", "routing-change", *(x for r_ in route for x in ("-s", r_)), "--deployment", str(dep)]
    r = cli("--home", str(named), *args, "--now", "2026-09-10T11:30:00Z", "--json")
    assert r.code in (0, 1), r.err  # an answer from the named ledger, not an error of the empty one
    assert json.loads(r.out)["checkpoint"]["size"] >= size
    # the sub-command's own --home still wins over the root's, and LEDGER_HOME alone is still read
    r = cli("--home", str(home), "verdict", "--home", str(named), "-s", subject, "--json")
    assert json.loads(r.out)["verdict"] == "QUALIFIED", r.err
    r = cli("verdict", "-s", subject)  # LEDGER_HOME's: the `home` fixture's path, never initialised
    assert r.code == 2 and f"no ledger at {home}" in r.err


def test_log_refuses_a_page_size_and_kind_filter_that_would_read_as_no_evidence(
    tmp_path: Path, cli: Any
) -> None:
    """Regression: `ledger log --limit 0 --json` printed an empty last page (next null) of a log that holds
    entries, `--limit -1` everything, and `--kind nonsense` (or `HOST.PROBE`) no entries with exit 0 — a
    misspelled filter read as "no such evidence". Each is now an error naming the problem (exit 2)."""
    (tmp_path / "named").mkdir()
    named, ledger, _b = _campaign_home(tmp_path / "named", qualified_entries())
    ledger.close()
    for args, words in (
        (["--limit", "0"], "--limit"),
        (["--limit", "-1"], "--limit"),
        (["--after", "-5"], "--after"),
        (["--kind", "nonsense"], "kind filter 'nonsense' names no kind"),
        (["--kind", "HOST.PROBE"], "kind filter 'HOST.PROBE' names no kind"),
        (["--kind", "nope.*"], "kind filter 'nope.*' names no kind"),
    ):
        r = cli("--home", str(named), "log", *args, "--json")
        assert r.code == 2 and words in r.err, (args, r.err)
        assert r.out == ""
    for args in (["--kind", "host.probe"], ["--kind", "key.*"], ["--limit", "1"]):  # the neighbours
        r = cli("--home", str(named), "log", *args, "--json")
        assert r.code == 0 and json.loads(r.out)["items"], (args, r.err)
