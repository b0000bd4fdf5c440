"""A typo of a manifest key the policy reads, not compared as a binding, keeps the verdict from QUALIFIED.

Audit 29 (a note of its fix): ``hostname``, ``served_name`` and ``device`` are read from the manifest by
the policy's CEL (``other-machine``, the identity checks, the CPU deployment) but are not
``[acceptance.bindings].keys``, so a job spec binding ``hostnmae`` was read as binding no machine:
``other-machine`` compared nothing. The keys the policy reads are found in its own text
(``acceptance.manifest_keys_read``: one list, no copy), and a spec key a typo away from one
(``misspelling_of``) is an unjudged item naming both keys: INCONCLUSIVE.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.policy.acceptance import manifest_keys_read
from ledger.policy.loader import load_policy
from tests.policy.test_fail_closed import entry, qualified_entries, verdict_of


def _with_spec_key(old: str | None, new: str | None, value: str = "x") -> list[dict[str, Any]]:
    es = qualified_entries()
    b = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    if old is not None:
        value = b.pop(old)
    if new is not None:
        b[new] = value
    return es


def test_the_manifest_keys_the_shipped_policy_reads_come_from_its_text() -> None:
    read = manifest_keys_read(load_policy("backend-qualification"))
    assert {"served_name", "hostname", "device"} <= set(read), read
    assert "bindings" not in read  # comment lines ("manifest.bindings.device") are left out


@pytest.mark.parametrize(
    ("old", "typo"),
    [
        ("hostname", "hostnmae"),  # two letters swapped
        ("hostname", "host-name"),  # a separator
        ("hostname", "hostnam"),  # a letter dropped
        ("served_name", "served_nmae"),
        ("served_name", "servedName"),
    ],
)
def test_a_misspelled_manifest_key_the_policy_reads_is_not_qualified(
    tmp_path: Path, old: str, typo: str
) -> None:
    v = verdict_of(tmp_path, _with_spec_key(old, typo))
    assert v["verdict"] == "INCONCLUSIVE", v["verdict"]
    [item] = [u for u in v["unjudged"] if "misspelling" in u["detail"]]
    assert f"binds {typo!r}, a misspelling of {old!r}" in item["detail"], item


def test_a_misspelled_hostname_beside_the_right_one_is_not_qualified(tmp_path: Path) -> None:
    """Which one the approval meant cannot be told, also where the right key is bound beside the typo."""
    v = verdict_of(tmp_path, _with_spec_key(None, "hsotname", "other-box"))
    assert v["verdict"] == "INCONCLUSIVE"
    assert any("'hsotname', a misspelling of 'hostname'" in u["detail"] for u in v["unjudged"])


def test_a_misspelled_device_key_is_not_qualified(tmp_path: Path) -> None:
    """``devcie = "cpu"`` would read as a GPU deployment (no ``device``): named, not taken as absent."""
    v = verdict_of(tmp_path, _with_spec_key(None, "devcie", "cpu"))
    assert v["verdict"] == "INCONCLUSIVE"
    assert any("'devcie', a misspelling of 'device'" in u["detail"] for u in v["unjudged"])


@pytest.mark.parametrize("key", ["team", "notes", "host", "hostname_alias_of_the_fleet", "model_path"])
def test_a_key_like_no_read_key_stays_recorded_and_qualified(tmp_path: Path, key: str) -> None:
    v = verdict_of(tmp_path, _with_spec_key(None, key))
    assert v["verdict"] == "QUALIFIED", (key, v["unjudged"])


def test_the_right_keys_stay_qualified(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, qualified_entries())
    assert v["verdict"] == "QUALIFIED" and not v["unjudged"]
