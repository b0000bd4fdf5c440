"""Audit 30: a job spec binding key of look-alike letters unpinned what the approval meant to bind.

``еnginе`` (Cyrillic ``е``), ``аdаpter`` or ``ｅｎｇｉｎｅ_version`` read as binding keys, but name none: the
policy recorded them and compared nothing, so a campaign bound to sglang and run on vllm was QUALIFIED.
Ingest now refuses a non-ASCII key of ``spec.bindings`` naming it; ASCII keys, misspelled or not, are the
policy's to judge (``acceptance.misspelling_of``)."""

from __future__ import annotations

import pytest

from ledger.errors import SchemaError
from ledger.service import Ledger

SUBJECT = {"campaign": "lookalike-1"}


def _job(bindings: dict[str, str]) -> dict[str, object]:
    return {
        "job_id": "j-1",
        "state": "running",
        "started_at": "2026-12-05T20:00:00Z",
        "spec": {"bindings": bindings},
    }


@pytest.mark.parametrize(
    "key",
    [
        "\u0435ngin\u0435",  # Cyrillic е
        "\u0430d\u0430pter",  # Cyrillic а
        "\u0435ngin\u0435_v\u0435rsion",
        "\uff45\uff4e\uff47\uff49\uff4e\uff45_version",  # fullwidth
        "engine\u200b",  # a zero-width space
        "model_revisi\u03bfn",  # Greek ο
    ],
)
def test_a_binding_key_of_lookalike_letters_is_refused_at_ingest(ledger: Ledger, key: str) -> None:
    size = ledger.size()
    with pytest.raises(SchemaError, match=r"spec\.bindings keys must be ASCII"):
        ledger.make_statement("job", SUBJECT, _job({key: "sglang", "model_revision": "abc"}))
    assert ledger.size() == size


@pytest.mark.parametrize("key", ["engine", "engine_verison", "Engine-Version", "team", "model_revision "])
def test_ascii_binding_keys_are_the_policys_to_judge(ledger: Ledger, key: str) -> None:
    """The neighbours: an ASCII key is stored, right or misspelled; the policy judges what it binds."""
    st = ledger.make_statement("job", SUBJECT, _job({key: "vllm"}))
    assert st["payload"]["spec"]["bindings"] == {key: "vllm"}


def test_a_lookalike_value_is_no_key_and_is_stored(ledger: Ledger) -> None:
    """Only keys must be ASCII: a value is compared as written (a non-ASCII model path binds as it is)."""
    st = ledger.make_statement("job", SUBJECT, _job({"model_path": "/models/\u0435ngine"}))
    assert st["payload"]["spec"]["bindings"]["model_path"] == "/models/\u0435ngine"
