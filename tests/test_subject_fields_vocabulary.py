"""The subject fields the CLI knows are the ones the code reads.

Regression: `ledger record … -s commit=<hex>`, as docs/POLICY.md tells a repaired commit's gate.result to be
recorded, warned "unknown subject field 'commit'" — the review rule reads exactly that field, but the CLI's
list (`SUBJECT_FIELDS`) left it out. This test reads every subject field the policy engine, the API and the
shipped policies read, and fails when one is missing from the list.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ledger.cli._common import SUBJECT_FIELDS

REPO = Path(__file__).resolve().parents[1]
_PY = re.compile(r"subject(?:\.get\(|\[)\"([a-z_]+)\"")
_CEL = re.compile(r"subject\.([a-z_]+)")


def _read_fields() -> set[str]:
    found: set[str] = set()
    for path in [*(REPO / "ledger").rglob("*.py"), *(REPO / "api").rglob("*.py")]:
        found |= set(_PY.findall(path.read_text(encoding="utf-8")))
    for path in (REPO / "policies").glob("*.toml"):
        found |= set(_CEL.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_subject_field_the_code_reads_is_known_to_the_cli() -> None:
    read = _read_fields()
    assert {"campaign", "host", "model", "commit"} <= read  # the scan finds what it should
    assert read - set(SUBJECT_FIELDS) == set()


def test_a_repaired_commit_is_recorded_without_a_warning(cli: Any) -> None:
    assert cli("init").code == 0
    assert cli("keys", "new", "col", "--role", "collector").code == 0
    r = cli(
        "record", "gate.result", "--key", "col", "-s", "campaign=c1", "-s", "host=h",
        "-s", f"commit={'cafe' * 10}", "--data", '{"gate": "semantic", "status": "passed"}',
    )  # fmt: skip
    assert r.code == 0, r.err
    assert "unknown subject field" not in r.err
    typo = cli("log", "-s", "comit=cafe")  # a misspelling of a known field: refused (audit 75 f2)
    assert typo.code == 2 and "'comit' misspells the subject field 'commit'" in typo.err, typo.err
    other = cli("log", "-s", "region=eu")  # another field: recorded/asked with a warning, as before
    assert other.code == 0 and "warning: unknown subject field 'region'" in other.err
