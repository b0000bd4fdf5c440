"""Audit 75 f2: an entry's subject that misspells a known field (``hots=gpu-box-2``, ``hsot=``, ``modle=``,
``bakend=``) was stored, and read by the policy as one that leaves the field out: a campaign whose engine
entries ran on another host was QUALIFIED, also asked ``host=gpu-box-1`` (audit 74 f1's split, field
renamed). Now ingest refuses such a field naming both (``ledger.entries.subject_problem``, through
``misspelled_subject_field``: the one reading of a misspelled key, ``misspelling_of``), the API with 422, the
CLI's ``--subject`` with exit 2; and a verdict on entries stored that way before the rule has a
``misspelled`` item naming both fields, so it is not QUALIFIED."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import ledger.service as service_mod
from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.canonical import canonical_bytes
from ledger.cli._common import parse_subject
from ledger.entries import check_ingest, format_time, misspelled_subject_field, subject_problem
from ledger.errors import InputError, SchemaError
from ledger.listing import SUBJECT_FIELDS
from ledger.service import Ledger
from ledger.signing import sign_envelope
from ledger.tokens import create_token
from tests.policy.test_fail_closed import SUBJECT, entry, qualified_entries
from tests.policy.test_fix83_campaign_on_two_hosts import RAN_ELSEWHERE, verdict_built

MISSPELLED = [("hots", "host"), ("hsot", "host"), ("modle", "model"), ("bakend", "backend")]
# the same but for case-insensitive punctuation, or one slip more of a long field
ALSO = [("back_end", "backend"), ("host.", "host"), ("campain", "campaign"), ("deploymnet", "deployment")]
# other fields, recorded as they are: not one edit from a short field, nor a known field with a word added
OTHER = [
    "region",
    "gpu",
    "node",
    "model_revision",
    "backend_version",
    "hostname",
    "zone",
    "deployment_id",
    "mode",
]
NO_HOST = {k: v for k, v in SUBJECT.items() if k != "host"}
CAMPAIGN_ONLY = {"campaign": SUBJECT["campaign"]}


@pytest.mark.parametrize(("spelled", "known"), MISSPELLED + ALSO)
def test_a_misspelled_subject_field_names_the_field_it_misspells(spelled: str, known: str) -> None:
    assert misspelled_subject_field(spelled) == known
    problem = subject_problem(spelled, "gpu-box-2")
    assert problem is not None and repr(spelled) in problem and repr(known) in problem, problem


@pytest.mark.parametrize("field", [*SUBJECT_FIELDS, *OTHER])
def test_a_known_or_other_subject_field_is_no_misspelling(field: str) -> None:
    assert misspelled_subject_field(field) is None
    assert subject_problem(field, "gpu-box-2") is None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Ledger, dict[str, str]]]:
    home = tmp_path_factory.mktemp("misspelled") / "home"
    ledger = Ledger.init(home)
    ledger.new_key("coll", ["collector"])
    tokens = {role: create_token(ledger.engine, f"t-{role}", role)[0] for role in ("reader", "writer")}
    app = create_app(ApiSettings(home=str(home)), ledger=ledger)
    with TestClient(app) as client:
        yield client, ledger, tokens
    ledger.close()


def _envelope(ledger: Ledger, subject: dict[str, str]) -> dict[str, Any]:
    st = {
        "_type": "https://evidence-ledger.dev/entry/v1",
        "kind": "note",
        "kind_version": 1,
        "subject": subject,
        "payload": {"text": "x"},
        "artifacts": [],
        "refs": [],
        "collected_at": format_time(datetime.now(UTC)),
        "collector": {"host": "h", "tool": "evidence-ledger", "version": "x"},
    }
    return sign_envelope(json.loads(canonical_bytes(st)), ledger.signing_key("coll")).to_json()


@pytest.mark.parametrize(("spelled", "known"), MISSPELLED)
def test_a_misspelled_subject_field_is_refused_at_ingest(
    site: tuple[TestClient, Ledger, dict[str, str]], spelled: str, known: str
) -> None:
    """The failure: stored as a field of its own. Now ``ledger record`` and ``POST /v1/entries`` refuse it
    (SchemaError; 422) naming both fields; nothing is stored."""
    client, ledger, tokens = site
    size = ledger.size()
    subject = {"campaign": "c1", spelled: "gpu-box-2"}
    with pytest.raises(SchemaError, match=rf"subject\.{spelled}: .*{known!r}"):
        ledger.record("note", subject, {"text": "x"}, key="coll")
    r = client.post(
        "/v1/entries",
        json=_envelope(ledger, subject),
        headers={"Authorization": f"Bearer {tokens['writer']}"},
    )
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert f"subject.{spelled}" in detail and repr(known) in detail, detail
    assert ledger.size() == size


def test_the_right_spelling_and_another_field_are_taken(
    site: tuple[TestClient, Ledger, dict[str, str]],
) -> None:
    """Neighbour (must still pass): the known field, and a field the ledger records as it is."""
    client, ledger, tokens = site
    for subject in ({"campaign": "c1", "host": "gpu-box-2"}, {"campaign": "c1", "region": "eu-west"}):
        r = client.post(
            "/v1/entries",
            json=_envelope(ledger, subject),
            headers={"Authorization": f"Bearer {tokens['writer']}"},
        )
        assert r.status_code in (200, 201), r.text


def test_the_cli_parse_subject_refuses_a_misspelled_field() -> None:
    """The CLI's ``--subject`` warned only; a misspelling of a known field is an input error naming both."""
    with pytest.raises(InputError, match=r"'hots' misspells the subject field 'host'") as ex:
        parse_subject(["campaign=c1", "hots=gpu-box-2"])
    assert "host=gpu-box-2" in ex.value.hint_text
    assert parse_subject(["campaign=c1", "host=gpu-box-2"]) == {"campaign": "c1", "host": "gpu-box-2"}


def test_the_cli_exits_2_on_a_misspelled_subject_field(tmp_path: Path) -> None:
    home = tmp_path / "home"
    led = Ledger.init(home)
    led.new_key("coll", ["collector"])
    led.close()
    cli = str(Path(sys.executable).parent / "ledger")
    for argv in (
        ["log", "--subject", "hots=gpu-box-2"],
        ["verdict", "--subject", "campaign=c1", "--subject", "modle=m-7"],
        ["record", "note", "--subject", "bakend=vllm", "--data", '{"text": "x"}', "--key", "coll"],
    ):
        r = subprocess.run([cli, "--home", str(home), *argv], capture_output=True, text=True, check=False)
        assert r.returncode == 2, (argv, r.returncode, r.stdout, r.stderr)
        assert "misspells the subject field" in r.stderr, r.stderr
    r = subprocess.run(
        [cli, "--home", str(home), "log", "--subject", "region=eu-west"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, (r.stdout, r.stderr)


# --- entries stored before ingest refused them -------------------------------------------------------------


def _engine_entries_name(field: str | None, value: str = "gpu-box-2") -> list[dict[str, Any]]:
    """The qualified campaign, every entry naming host=gpu-box-1 but the engine's own, which name ``field``
    (None: no host at all)."""
    es = qualified_entries()
    for e in es:
        # the entry's own subject fields kept (a reviewed result names the commit it was produced at)
        e["subject"] = {**e.get("subject", {}), **SUBJECT}
    for name in RAN_ELSEWHERE:
        entry(es, name)["subject"] = {**NO_HOST, **({} if field is None else {field: value})}
    return es


def _stored_before_the_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str | None, subject: dict[str, str]
) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    monkeypatch.setattr(service_mod, "check_ingest", lambda st: st)
    try:
        return verdict_built(tmp_path, _engine_entries_name(field), NO_HOST, subject)
    finally:
        monkeypatch.setattr(service_mod, "check_ingest", check_ingest)


@pytest.mark.parametrize("spelled", ["hots", "hsot"])
def test_a_campaign_with_a_misspelled_host_stored_is_not_qualified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelled: str
) -> None:
    v, stored = _stored_before_the_rule(tmp_path, monkeypatch, spelled, CAMPAIGN_ONLY)
    assert stored["launch"] == {**NO_HOST, spelled: "gpu-box-2"}
    assert v["verdict"] == "INCONCLUSIVE"
    [item] = v["claims"]
    assert (item["field"], item["status"], item["spelled"]) == ("host", "misspelled", spelled)
    assert f"{spelled} 'gpu-box-2'" in item["detail"] and "'host'" in item["detail"]
    assert {c["value"] for c in item["entries"]} == {"gpu-box-2"} and len(item["entries"]) == len(
        RAN_ELSEWHERE
    )
    asked, _ = _stored_before_the_rule(tmp_path, monkeypatch, spelled, {**CAMPAIGN_ONLY, "host": "gpu-box-1"})
    assert asked["verdict"] == "INCONCLUSIVE"
    assert [(c["field"], c["status"]) for c in asked["claims"]] == [("host", "holds"), ("host", "misspelled")]


@pytest.mark.parametrize(("spelled", "known"), [("modle", "model"), ("bakend", "backend")])
def test_a_campaign_with_another_misspelled_route_field_is_not_qualified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelled: str, known: str
) -> None:
    v, _ = _stored_before_the_rule(tmp_path, monkeypatch, spelled, CAMPAIGN_ONLY)
    assert v["verdict"] == "INCONCLUSIVE"
    assert [(c["field"], c["status"], c["spelled"]) for c in v["claims"]] == [(known, "misspelled", spelled)]


def test_the_host_spelled_right_is_the_split_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour (must still fail): host=gpu-box-2 on the engine's entries is a split."""
    v, _ = _stored_before_the_rule(tmp_path, monkeypatch, "host", CAMPAIGN_ONLY)
    assert v["verdict"] == "INCONCLUSIVE"
    assert [(c["field"], c["status"]) for c in v["claims"]] == [("host", "split")]


@pytest.mark.parametrize("field", [None, "region"], ids=["host-left-out", "another-field"])
def test_a_field_left_out_or_another_field_is_no_misspelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str | None
) -> None:
    """Neighbour (must still pass): the engine's entries leaving the host out, or naming a field of their own,
    say nothing of another machine."""
    v, stored = _stored_before_the_rule(tmp_path, monkeypatch, field, CAMPAIGN_ONLY)
    assert "host" not in stored["launch"]
    assert v["verdict"] == "QUALIFIED", v.get("claims")
    assert "claims" not in v
