"""A key of the job's approved spec a typo away from a compared binding key is a misspelling of it.

Regression (audit 29, F6): the approved spec bound ``engine_verison`` (two letters swapped) and a launch of
another engine version was credited — QUALIFIED: only case, whitespace, ``.``, ``-`` and ``_`` variants of a
compared key (``Engine-Version``) were caught, so any other typo silently unpinned the key it meant. Now a
spec key within ``acceptance._typos`` edits (``acceptance._edits``, on the ``_loose`` form) of a compared key
is a ``misspelled_binding`` of it: the manifest names both keys and no launch matches it. A key that adds a
word to a compared one, or is like none, is recorded and not compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.policy.acceptance import misspelled_binding, misspelling_of
from tests.policy.test_fail_closed import entry, qualified_entries, verdict_of

QUALIFIED = "QUALIFIED"
# the compared keys of the shipped acceptance policy ([acceptance.bindings].keys, shard:* aside)
COMPARED = ["engine", "engine_version", "adapter", "native_revision", "model_revision", "model_repo"]


def _spec(es: list[dict[str, Any]]) -> dict[str, Any]:
    bindings: dict[str, Any] = entry(es, "campaign-job")["payload"]["spec"]["bindings"]
    return bindings


def _launch_rejection(v: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in v["rejected"] if v["_names"].get(r["entry"]) == "launch")


def test_a_transposed_engine_version_key_credits_no_launch_of_another_version(tmp_path: Path) -> None:
    """The audit's shape: the spec binds ``engine_verison: 0.32.0``, the launch ran 0.31.0."""
    es = qualified_entries()
    spec = _spec(es)
    del spec["engine_version"]
    spec["engine_verison"] = "0.32.0"
    entry(es, "launch")["payload"]["bindings"]["engine_version"] = "0.31.0"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE"
    assert v["manifest"]["bindings"]["engine_version"] == misspelled_binding(
        "engine_verison", "engine_version"
    )
    r = _launch_rejection(v)
    assert r["rule"] == "bindings-mismatch"
    assert "'engine_verison'" in r["detail"] and "'engine_version'" in r["detail"]


@pytest.mark.parametrize(
    ("typo", "key", "value"),
    [
        ("engine_verison", "engine_version", "0.32.0"),  # two letters swapped (the launch ran 0.32.0 too)
        ("engine_versin", "engine_version", "0.32.0"),  # a letter dropped
        ("engine_versionn", "engine_version", "0.31.0"),  # a letter added
        ("engine_vursion", "engine_version", "0.31.0"),  # a letter replaced
        ("engnie_verison", "engine_version", "0.32.0"),  # two slips in a long key
        ("Engine_Verison", "engine_version", "0.32.0"),  # a typo and another case
        ("model_revison", "model_revision", "1" * 40),
        ("enigne", "engine", "vllm"),  # one slip in a short key
    ],
)
def test_a_spec_key_a_typo_away_from_a_compared_key_is_not_dropped(
    tmp_path: Path, typo: str, key: str, value: str
) -> None:
    """Whatever value it binds: what the approved spec meant to bind cannot be told, so no launch matches."""
    es = qualified_entries()
    spec = _spec(es)
    del spec[key]
    spec[typo] = value
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED
    assert v["manifest"]["bindings"][key] == misspelled_binding(typo, key)
    assert v["manifest"]["bindings"][typo] == value  # recorded as written
    r = _launch_rejection(v)
    assert r["rule"] == "bindings-mismatch"
    assert repr(typo) in r["detail"] and repr(key) in r["detail"]


def test_a_misspelled_key_the_launch_never_binds_is_not_unpinned(tmp_path: Path) -> None:
    """``adaptor`` in the approved spec pins ``adapter``: a launch that binds no adapter does not match."""
    es = qualified_entries()
    _spec(es)["adaptor"] = "lora-7"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED
    r = _launch_rejection(v)
    assert r["rule"] == "bindings-mismatch" and "'adaptor'" in r["detail"] and "'adapter'" in r["detail"]


def test_a_typo_beside_the_right_key_still_leaves_the_approved_spec_unclear(tmp_path: Path) -> None:
    """``engine_version`` and ``engine_verison`` both bound: which one the approval meant cannot be told."""
    es = qualified_entries()
    _spec(es)["engine_verison"] = "0.31.0"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] != QUALIFIED
    assert v["manifest"]["bindings"]["engine_version"] == misspelled_binding(
        "engine_verison", "engine_version"
    )


@pytest.mark.parametrize(
    "key",
    [
        "engine_build",  # shares a prefix, adds a word: another field
        "engine_version_min",
        "engine_id",  # two edits from the six-letter ``engine``: another word
        "engineer",
        "team",  # like no compared key
        "notes",
        "model_path",  # keys the runner writes (collectors/campaign.py NOT_BOUND)
        "attempt",
    ],
)
def test_a_key_far_from_every_compared_key_is_recorded_not_compared(tmp_path: Path, key: str) -> None:
    es = qualified_entries()
    _spec(es)[key] = "anything"
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == QUALIFIED, v["rejected"]
    assert v["manifest"]["bindings"][key] == "anything"
    assert v["manifest"]["bindings"]["engine_version"] == "0.32.0"
    assert misspelling_of(key, COMPARED) is None


def test_the_right_keys_stay_qualified(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, qualified_entries())
    assert v["verdict"] == QUALIFIED
    assert v["manifest"]["bindings"]["engine_version"] == "0.32.0"
    assert not any(str(b).startswith("misspelled:") for b in v["manifest"]["bindings"].values())


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("engine_version", None),  # the key itself
        ("engine_verison", "engine_version"),
        ("Engine-Version", "engine_version"),  # case and separators: no edit at all
        ("engine version ", "engine_version"),
        ("engin_version", "engine_version"),
        ("engine_versions", "engine_version"),
        ("enigne", "engine"),
        ("engines", "engine"),
        ("engne", "engine"),
        ("adaptor", "adapter"),
        ("adaptr", "adapter"),
        ("nativ_revision", "native_revision"),
        ("native_revison", "native_revision"),
        ("model_repos", "model_repo"),
        ("engine_build", None),
        ("engine_id", None),
        ("engineer", None),
        ("model_version", None),  # three edits from model_revision: another word
        ("served_name", None),  # keys the runner writes (collectors/campaign.py NOT_BOUND)
        ("hostname", None),
        ("device", None),
        ("team", None),
        ("shard:model.safetensors", None),
    ],
)
def test_misspelling_of(key: str, meant: str | None) -> None:
    assert misspelling_of(key, COMPARED) == meant
