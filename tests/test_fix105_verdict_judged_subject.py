"""Regressions of audit 84 (fix105), F1: a verdict carrying another campaign's result.

Ingest refused a ``verdict`` entry whose ``payload.subject`` contradicted the subject it is logged under, but
the subject a verdict judged can also be read from its inline ``result`` or from the stored result artifact
its ``result_digest`` names: one logged under ``campaign=bad1`` whose result artifact was another campaign's
real QUALIFIED result was stored, ``ledger verdict replay`` said "same: QUALIFIED … byte-identical" and the
home page showed bad1 as recorded QUALIFIED. One reading now (``ledger.entries.judged_subject``: the payload's
subject, else the inline result's, else the stored result's; two that disagree judge no one subject) is used
by ingest (which opens the result artifact: it must be in the store), by replay, by the pages
(tests/api/test_fix105_pages.py), by the routing gate and the summaries (``evaluated_subject``) and by
``ledger export`` (the VSA).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

import ledger.service as service
from ledger.canonical import canonical_bytes
from ledger.entries import ArtifactRef, judged_subject, judged_subject_problem, parse_statement
from ledger.errors import ArtifactMissingError, InputError, SchemaError
from ledger.policy import evaluate, load_policy, record_verdict
from ledger.policy.verdict import evaluated_subject, result_digest
from ledger.service import Ledger

AT = "2026-09-10T11:00:00Z"


def _payload(subject: dict[str, str] | None = None, **more: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "verdict": "QUALIFIED",
        "status": "qualified",
        "policy": {"name": "backend-qualification"},
        "checkpoint": {"size": 1},
        **more,
    }
    if subject is not None:
        p["subject"] = subject
    return p


def _put(led: Ledger, value: Any) -> tuple[str, ArtifactRef]:
    data = value if isinstance(value, bytes) else canonical_bytes(value)
    stored = led.store.put_stream(io.BytesIO(data))
    art = ArtifactRef(name="verdict-result.json", digest=str(stored.digest), size=stored.size)
    return str(stored.digest), art


def _record(
    led: Ledger, subject: dict[str, str], payload: dict[str, Any], art: ArtifactRef | None = None
) -> Any:
    return led.record(
        "verdict", subject, payload, key="admin", artifacts=[art] if art else [], collected_at=AT
    )


def _statement(subject: dict[str, str], payload: dict[str, Any]) -> Any:
    return parse_statement(
        {
            "_type": "https://evidence-ledger.dev/entry/v1",
            "kind": "verdict",
            "kind_version": 1,
            "subject": subject,
            "payload": payload,
            "collected_at": AT,
            "collector": {"host": "h1"},
        }
    )


def bypass(led: Ledger, *args: Any) -> Any:
    """Stores an entry as the log did before ingest read a verdict's result (the rule predates it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(service, "check_ingest", lambda st: st)
        mp.setattr(service.Ledger, "_check_recorded_result", lambda self, st: None)
        return _record(led, *args)


# --- ingest ---------------------------------------------------------------------------------------------


def test_verdict_whose_result_artifact_judged_another_campaign_is_refused_at_ingest(ledger: Ledger) -> None:
    digest, art = _put(ledger, {"subject": {"campaign": "good"}, "verdict": "QUALIFIED"})
    size = ledger.size()
    with pytest.raises(
        SchemaError, match="recorded result artifact names campaign=good, the entry's subject"
    ):
        _record(ledger, {"campaign": "bad1"}, _payload(result_digest=digest), art)
    # the payload naming the row, the result another campaign: the entry judged no one subject
    with pytest.raises(
        SchemaError, match="recorded result artifact judged campaign=good, the payload subject"
    ):
        _record(ledger, {"campaign": "bad1"}, _payload({"campaign": "bad1"}, result_digest=digest), art)
    assert ledger.size() == size  # nothing stored


def test_verdict_whose_inline_result_judged_another_campaign_is_refused_at_ingest(ledger: Ledger) -> None:
    size = ledger.size()
    with pytest.raises(SchemaError, match="inline result names campaign=good"):
        _record(ledger, {"campaign": "bad1"}, _payload(result={"subject": {"campaign": "good"}}))
    with pytest.raises(SchemaError, match="inline result judged campaign=good"):
        _record(
            ledger,
            {"campaign": "bad1"},
            _payload({"campaign": "bad1"}, result={"subject": {"campaign": "good"}}),
        )
    assert ledger.size() == size


@pytest.mark.parametrize(
    ("stored", "error", "match"),
    [
        (None, ArtifactMissingError, "is not in the store"),  # never uploaded: nobody could read it
        (b"not json", SchemaError, "cannot be read"),
        ([{"subject": {"campaign": "bad1"}}], SchemaError, "not a JSON object"),
        ({"verdict": "QUALIFIED"}, SchemaError, "names no subject"),  # the field dropped
        ({"subjects": {"campaign": "bad1"}}, SchemaError, "names no subject"),  # renamed
        ({"subject": "campaign=bad1"}, SchemaError, "not a subject"),  # mistyped
        ({"subject": {"campaign": 1}}, SchemaError, "not a subject"),
    ],
    ids=["absent", "not-json", "list", "dropped", "renamed", "text", "number"],
)
def test_verdict_whose_result_artifact_cannot_be_read_is_refused_at_ingest(
    ledger: Ledger, stored: Any, error: type[Exception], match: str
) -> None:
    if stored is None:
        digest, art = "blake3:" + "0" * 64, None
    else:
        digest, art = _put(ledger, stored)
    size = ledger.size()
    with pytest.raises(error, match=match):
        _record(ledger, {"campaign": "bad1"}, _payload({"campaign": "bad1"}, result_digest=digest), art)
    assert ledger.size() == size


def test_verdict_whose_result_digest_is_no_address_is_refused(ledger: Ledger) -> None:
    with pytest.raises(SchemaError, match="result_digest"):
        _record(ledger, {"campaign": "bad1"}, _payload(result_digest="../../etc/passwd"))


def test_honest_verdict_is_stored_its_fields_in_any_order_a_host_as_a_host_name(ledger: Ledger) -> None:
    result = {"verdict": "QUALIFIED", "subject": {"host": "GPU-BOX-1.", "campaign": "c"}}
    digest, art = _put(ledger, result)
    e = _record(
        ledger,
        {"model": "m", "host": "gpu-box-1", "campaign": "c"},
        _payload({"campaign": "c", "host": "gpu-box-1"}, result_digest=digest),
        art,
    )
    assert not e.duplicate
    # no payload subject (older entries): the stored result names it, and it is the entry's own
    digest2, art2 = _put(ledger, {"subject": {"campaign": "c2"}})
    _record(ledger, {"campaign": "c2", "host": "gpu-box-1"}, _payload(result_digest=digest2), art2)


def test_the_verdict_recorded_by_ledger_verdict_record_is_stored_and_replays_the_same(ledger: Ledger) -> None:
    ledger.record("note", {"campaign": "c", "host": "gpu-box-1"}, {"text": "started"}, key="admin")
    result = evaluate(ledger, {"campaign": "c"}, load_policy("backend-qualification"))
    e = record_verdict(ledger, result, key="admin")
    replay = ledger.replay_verdict(e.entry_id)
    assert replay["same"] is True and replay["differences"] == []


# --- the one reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "result", "judged"),
    [
        ({"subject": {"campaign": "c"}}, None, {"campaign": "c"}),
        ({"result": {"subject": {"campaign": "c"}}}, None, {"campaign": "c"}),
        ({}, {"subject": {"campaign": "c"}}, {"campaign": "c"}),
        ({}, None, None),  # names none (older entries): the row is what the pages derive
        ({"subject": {}}, None, None),
        # the same subject in another order, a host as a host name
        ({"subject": {"host": "H.", "campaign": "c"}}, {"subject": {"campaign": "c", "host": "h"}}, None),
    ],
)
def test_judged_subject_reads_payload_then_inline_then_stored(
    payload: dict[str, Any], result: dict[str, Any] | None, judged: dict[str, str] | None
) -> None:
    got = judged_subject(payload, result)
    if payload.get("subject", {}).get("host"):
        assert got == {"host": "H.", "campaign": "c"}
    else:
        assert got == judged


@pytest.mark.parametrize(
    ("payload", "result"),
    [
        ({"subject": {"campaign": "c"}}, {"subject": {"campaign": "d"}}),
        ({"subject": {"campaign": "c"}, "result": {"subject": {"campaign": "d"}}}, None),
        ({"result": {"subject": {"campaign": "c"}}}, {"subject": {"campaign": "d"}}),
        ({"subject": {"campaign": "c"}}, {"subject": {"campaign": "c", "host": "h"}}),  # a field more
        ({"subject": {"campaign": "c", "host": "h"}}, {"subject": {"campaign": "c"}}),  # a field less
    ],
)
def test_places_that_disagree_judge_no_one_subject(payload: dict[str, Any], result: Any) -> None:
    with pytest.raises(SchemaError, match="judges one subject"):
        judged_subject(payload, result)
    assert judged_subject_problem(_statement({"campaign": "c", "host": "h"}, _payload(**payload)), result)
    # the routing gate and the summaries read the payload alone: where it disagrees with itself, nothing
    if result is None:
        assert evaluated_subject(payload) is None


def test_routing_and_summaries_read_the_subject_ingest_checked() -> None:
    assert evaluated_subject({"subject": {"campaign": "c"}}) == {"campaign": "c"}
    assert evaluated_subject({"result": {"subject": {"campaign": "c"}}}) == {"campaign": "c"}
    assert evaluated_subject({"subject": {"campaign": "c"}, "result": {"subject": {"campaign": "c"}}}) == {
        "campaign": "c"
    }
    assert evaluated_subject({}) is None


# --- replay and export of an entry stored before the rule ------------------------------------------------


def _forged(ledger: Ledger) -> Any:
    """bad1's verdict entry carrying campaign good's real result, stored before ingest read results."""
    ledger.record("note", {"campaign": "good", "host": "gpu-box-1"}, {"text": "started"}, key="admin")
    result = evaluate(ledger, {"campaign": "good"}, load_policy("backend-qualification"))
    honest = record_verdict(ledger, result, key="admin")
    payload = {k: v for k, v in honest.statement.payload.items() if k != "subject"}
    art = honest.statement.artifacts[0]
    assert payload["result_digest"] == result_digest(result)
    return bypass(ledger, {"campaign": "bad1"}, payload, art)


def test_replay_of_a_verdict_carrying_another_campaigns_result_differs(ledger: Ledger) -> None:
    forged = _forged(ledger)
    replay = ledger.replay_verdict(forged.entry_id)
    assert replay["same"] is False
    assert any("judged another subject" in d and "campaign=good" in d for d in replay["differences"])


def test_cli_replay_of_a_verdict_carrying_another_campaigns_result_exits_1(ledger: Ledger, cli: Any) -> None:
    forged = _forged(ledger)
    r = cli("verdict", "replay", forged.entry_id)
    assert r.code == 1 and "differs" in r.out and "same" not in r.out.split(":", 1)[0]
    j = cli("verdict", "replay", forged.entry_id, "--json")
    assert j.code == 1 and json.loads(j.out)["same"] is False


def test_export_of_a_verdict_carrying_another_campaigns_result_is_refused(
    ledger: Ledger,
) -> None:
    from ledger.export import _vsa

    forged = _forged(ledger)
    with pytest.raises(InputError, match="cannot be summarised"):
        _vsa(ledger, ledger.get(forged.entry_id))


def test_older_shape_inline_result_with_its_digest_not_stored_is_read_inline(ledger: Ledger) -> None:
    inline = {"subject": {"campaign": "c"}, "verdict": "QUALIFIED"}
    _record(ledger, {"campaign": "c"}, _payload(result=inline, result_digest=result_digest(inline)))
    # the stored artifact, where there is one, is read too: it judged the same subject or the entry is refused
    digest, art = _put(ledger, {"subject": {"campaign": "good"}})
    with pytest.raises(SchemaError, match="judges one subject"):
        _record(ledger, {"campaign": "c"}, _payload(result=inline, result_digest=digest), art)
