"""Regressions of audit 81 (fix100): what ingest refuses of a new entry, one rule for the CLI and the API.

F1: a ``verdict`` entry logged under ``campaign=bad1`` whose payload said it judged ``campaign=good`` was
accepted, and the reviewers' pages showed campaign bad1 as QUALIFIED. Ingest (``check_ingest``: the CLI's
``record`` and the API's ``POST /v1/entries`` alike) now refuses a verdict whose payload ``subject``
contradicts, or names a field beyond, the subject it is logged under (a host compared as a host name).
Minor: the API stored ``collected_at`` 9999-12-31 and 0001-01-01, which ``--collected-at`` refuses: one
range (``time_range_problem``) for both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger.entries import check_ingest, parse_statement, same_subject_value, time_range_problem
from ledger.errors import InputError, SchemaError
from ledger.service import Ledger

AT = "2026-09-10T11:00:00Z"


def _verdict_payload(subject: dict[str, Any] | None) -> dict[str, Any]:
    p: dict[str, Any] = {
        "verdict": "QUALIFIED",
        "status": "passed",
        "policy": {"name": "backend-qualification"},
        "checkpoint": {"size": 1},
    }
    if subject is not None:
        p["subject"] = subject
    return p


def _statement(kind: str, subject: dict[str, str], payload: dict[str, Any], at: str = AT) -> Any:
    return parse_statement(
        {
            "_type": "https://evidence-ledger.dev/entry/v1",
            "kind": kind,
            "kind_version": 1,
            "subject": subject,
            "payload": payload,
            "collected_at": at,
            "collector": {"host": "h1"},
        }
    )


def test_verdict_whose_payload_names_another_campaign_is_refused_at_ingest(ledger: Ledger) -> None:
    size = ledger.size()
    with pytest.raises(
        SchemaError, match=r"payload subject names campaign=good, the entry's subject campaign=bad1"
    ):
        ledger.record(
            "verdict",
            {"campaign": "bad1"},
            _verdict_payload({"campaign": "good"}),
            key="admin",
            collected_at=AT,
        )
    assert ledger.size() == size  # nothing stored


@pytest.mark.parametrize(
    ("statement_subject", "payload_subject", "refused"),
    [
        # the honest shape: the payload names what it judged, the statement that and the identity
        ({"campaign": "c", "host": "gpu-box-1", "model": "m"}, {"campaign": "c"}, None),
        # a host is one host however its name is cased (as the verdict compares it)
        ({"campaign": "c", "host": "gpu-box-1"}, {"campaign": "c", "host": "GPU-BOX-1."}, None),
        # the payload subject left out (older entries): nothing to contradict; pages derive from the row
        ({"campaign": "c"}, None, None),
        # another value of a field both name
        ({"campaign": "c", "host": "gpu-box-1"}, {"campaign": "c", "host": "gpu-box-2"}, "host=gpu-box-2"),
        # a model differs by case: models are compared as stored (the subject index matches them so)
        ({"campaign": "c", "model": "M"}, {"campaign": "c", "model": "m"}, "model=m"),
        # a field the statement does not name: no reader of that field would find the entry
        ({"campaign": "c"}, {"campaign": "c", "host": "gpu-box-1"}, "does not name"),
        # the campaign renamed away (a field dropped from the statement)
        ({"host": "gpu-box-1"}, {"campaign": "c"}, "does not name"),
    ],
)
def test_verdict_payload_subject_neighbours(
    statement_subject: dict[str, str], payload_subject: dict[str, str] | None, refused: str | None
) -> None:
    st = _statement("verdict", statement_subject, _verdict_payload(payload_subject))
    if refused is None:
        assert check_ingest(st) is st
    else:
        with pytest.raises(SchemaError, match=refused):
            check_ingest(st)


def test_verdict_payload_subject_mistyped_is_refused_by_the_schema() -> None:
    with pytest.raises(SchemaError, match="subject"):
        _statement("verdict", {"campaign": "c"}, _verdict_payload({"campaign": 1}))  # type: ignore[dict-item]


def test_same_subject_value_compares_hosts_as_host_names_and_others_exactly() -> None:
    assert same_subject_value("host", "GPU-Box-1.", "gpu-box-1")
    assert not same_subject_value("model", "Qwen", "qwen")
    assert not same_subject_value("campaign", "good", "bad1")


def test_routing_change_deployment_of_another_host_is_recorded_as_judged() -> None:
    """A routing.change names no judged subject: its deployment may be another host's layout, which the
    routing check refuses (``deployment-host``) — a refused decision is recorded as it was judged."""
    payload = {
        "action": "route",
        "allowed": False,
        "reasons": ["the deployment is for host b, not a"],
        "deployment": {"host": "b", "services": []},
    }
    st = _statement("routing.change", {"model": "m", "host": "a"}, payload)
    assert check_ingest(st) is st


@pytest.mark.parametrize("at", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "9000-01-01T00:00:00Z",
                                "1969-12-31T23:59:59Z"])  # fmt: skip
def test_collected_at_the_cli_refuses_is_refused_at_ingest_too(ledger: Ledger, at: str) -> None:
    size = ledger.size()
    with pytest.raises(SchemaError, match=r"collected_at .* is out of range"):
        ledger.record("note", {"campaign": "c"}, {"text": "x"}, key="admin", collected_at=at)
    assert ledger.size() == size
    # the CLI's reading of a typed time refuses it by the same range
    from ledger.entries import parse_when

    with pytest.raises(InputError, match="out of range"):
        parse_when(at)


@pytest.mark.parametrize("at", ["1970-01-01T00:00:00Z", "8999-12-31T23:59:59Z", AT])
def test_collected_at_within_the_range_is_stored(at: str) -> None:
    st = _statement("note", {"campaign": "c"}, {"text": "x"}, at=at)
    assert check_ingest(st) is st


def test_the_range_is_defined_once() -> None:
    from datetime import UTC, datetime

    assert time_range_problem(datetime(2026, 1, 1, tzinfo=UTC)) is None
    assert time_range_problem(datetime(9999, 1, 1, tzinfo=UTC)) is not None


def test_cli_record_refuses_a_verdict_judging_another_campaign(
    tmp_path: Path, ledger: Ledger, cli: Any
) -> None:
    import json

    payload = tmp_path / "p.json"
    payload.write_text(json.dumps(_verdict_payload({"campaign": "good"})))
    size = ledger.size()
    args = ("record", "verdict", "--key", "admin", "--subject", "campaign=bad1", "--data", f"@{payload}")
    r = cli(*args)
    assert r.code != 0 and "payload subject names campaign=good" in r.out + r.err
    assert ledger.size() == size
