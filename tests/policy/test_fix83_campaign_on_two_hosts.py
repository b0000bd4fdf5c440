"""Audit 74 f1: a campaign whose engine ran on a second host — its launch, probes and harness results name
``host=gpu-box-2`` while its job, host probe and pin name ``gpu-box-1`` — was QUALIFIED when asked about the
campaign alone: host-prerequisites and model-pinned passed on one machine's facts, every other gate ran on
another. Since the campaign is the unit of a verdict (fix 71), its own entries must agree on the route's
fields (``verdict.SPLIT_FIELDS``: backend, model, host — a host by ``host_key``): where they name two values
the verdict is not QUALIFIED (INCONCLUSIVE, a ``split`` item naming both values and the entries)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import parse_time
from ledger.policy.fixtures import _Builder
from ledger.policy.loader import load_policy
from ledger.policy.verdict import SPLIT_FIELDS, evaluate
from ledger.service import Ledger
from tests.policy.test_fail_closed import KEYS, POLICY_DIR, SUBJECT, entry, qualified_entries, verdict_of

CAMPAIGN_ONLY = {"campaign": SUBJECT["campaign"]}
RAN_ELSEWHERE = ("launch", "health", "models", "completion", "structured", "sequential")


@contextmanager
def built(
    tmp_path: Path, entries: list[dict[str, Any]], defaults: Mapping[str, str]
) -> Iterator[tuple[Ledger, dict[str, dict[str, str]]]]:
    """The fixture ``entries`` recorded with ``defaults`` as the subject every entry starts from (an entry's
    own subject is merged over it: ``_Builder``), and each named entry's subject as the log stored it."""
    home = tmp_path / f"home-{len(list(tmp_path.glob('home-*')))}"
    led = Ledger.init(home, genesis_at=parse_time("2026-09-10T09:00:00Z"))
    try:
        spec = {"start": "2026-09-10T09:00:00Z", "keys": KEYS, "defaults": {"subject": dict(defaults)}}
        b = _Builder(led, {**spec, "entries": entries}, POLICY_DIR)
        b.enrol_keys()
        b.add_all(entries)
        stored = {n: dict(led.get(e.entry_id).statement.subject) for n, e in b.names.items()}
        yield led, stored
    finally:
        led.close()


def verdict_built(
    tmp_path: Path, entries: list[dict[str, Any]], defaults: Mapping[str, str], subject: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """The verdict for ``subject`` on ``entries`` recorded with ``defaults`` (``built``), and the subjects
    stored."""
    with built(tmp_path, entries, defaults) as (led, stored):
        return evaluate(led, dict(subject), load_policy("backend-qualification", POLICY_DIR)), stored


def _moved(field: str, value: str, names: tuple[str, ...] = RAN_ELSEWHERE) -> list[dict[str, object]]:
    es = qualified_entries()
    for name in names:
        e = entry(es, name)
        e["subject"] = {**SUBJECT, field: value}
    return es


def test_a_campaign_whose_entries_name_two_hosts_is_not_qualified(tmp_path: Path) -> None:
    v = verdict_of(tmp_path, _moved("host", "gpu-box-2"), subject=CAMPAIGN_ONLY)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    [split] = [c for c in v["claims"] if c["status"] == "split"]
    assert split["field"] == "host" and "gpu-box-1" in split["detail"] and "gpu-box-2" in split["detail"]
    assert {c["value"] for c in split["entries"]} == {"gpu-box-1", "gpu-box-2"}


@pytest.mark.parametrize(("field", "value"), [("model", "m-8"), ("backend", "sglang")])
def test_a_campaign_whose_entries_name_two_models_or_backends_is_not_qualified(
    tmp_path: Path, field: str, value: str
) -> None:
    v = verdict_of(tmp_path, _moved(field, value, ("completion",)), subject=CAMPAIGN_ONLY)
    assert v["verdict"] != "QUALIFIED", v["gates"]
    assert [c["field"] for c in v.get("claims", []) if c["status"] == "split"] == [field]


def test_one_host_in_two_spellings_is_one_host(tmp_path: Path) -> None:
    """Neighbour: hosts compare by host_key (case), so GPU-BOX-1 beside gpu-box-1 is no split."""
    v = verdict_of(tmp_path, _moved("host", "GPU-BOX-1"), subject=CAMPAIGN_ONLY)
    assert v["verdict"] == "QUALIFIED", v.get("claims")
    assert "claims" not in v  # the campaign asked alone, its entries agreeing: the result as before


NO_HOST = {k: v for k, v in SUBJECT.items() if k != "host"}


def test_entries_that_leave_the_host_out_are_no_split(tmp_path: Path) -> None:
    """Neighbour: an entry that names no host says nothing of another machine (field dropped). Built without
    a host in the defaults (``_Builder`` merges the defaults into each entry's subject: with ``SUBJECT``
    there, every entry named host after all — audit 75): the engine's entries are stored without host, the
    job, host probe and pin with host=gpu-box-1."""
    es = qualified_entries()
    for e in es:
        e["subject"] = {**(NO_HOST if e.get("name") in RAN_ELSEWHERE else SUBJECT), **e.get("subject", {})}
    v, stored = verdict_built(tmp_path, es, NO_HOST, CAMPAIGN_ONLY)
    assert all("host" not in stored[name] for name in RAN_ELSEWHERE), stored
    assert {stored[name].get("host") for name in ("campaign-job", "host", "pin")} == {SUBJECT["host"]}
    assert v["verdict"] == "QUALIFIED", (v.get("claims"), [g for g in v["gates"] if g["status"] != "passed"])
    assert "claims" not in v  # no entry names another host: no split, answered as the campaign alone
    assert v["identity"]["host"] == SUBJECT["host"]


def test_entries_that_leave_the_host_out_beside_another_host_are_a_split(tmp_path: Path) -> None:
    """Neighbour of the above (must still fail): with the host left out of the engine's entries, one more
    entry naming gpu-box-2 splits the campaign — an entry without the field does not hide one with another."""
    es = qualified_entries()
    for e in es:
        e["subject"] = {**(NO_HOST if e.get("name") in RAN_ELSEWHERE else SUBJECT), **e.get("subject", {})}
    entry(es, "completion")["subject"] = {**SUBJECT, "host": "gpu-box-2"}
    v, stored = verdict_built(tmp_path, es, NO_HOST, CAMPAIGN_ONLY)
    assert stored["completion"]["host"] == "gpu-box-2" and "host" not in stored["launch"]
    assert v["verdict"] == "INCONCLUSIVE"
    assert [(c["field"], c["status"]) for c in v["claims"]] == [("host", "split")]


def test_a_split_is_reported_beside_the_claims_asked(tmp_path: Path) -> None:
    """Neighbour: asked with a host, the host is a contradicted claim; a model split the question does not
    ask is still reported (and keeps the verdict from QUALIFIED)."""
    es = _moved("model", "m-8", ("completion",))
    v = verdict_of(tmp_path, es, subject={**CAMPAIGN_ONLY, "host": SUBJECT["host"]})
    assert v["verdict"] != "QUALIFIED"
    statuses = {(c["field"], c["status"]) for c in v["claims"]}
    assert ("host", "holds") in statuses and ("model", "split") in statuses


def test_the_split_fields_are_the_route_fields() -> None:
    from ledger.policy.verdict import IDENTITY_FIELDS

    assert set(SPLIT_FIELDS) <= set(IDENTITY_FIELDS)
    assert SPLIT_FIELDS == ("backend", "model", "host")
