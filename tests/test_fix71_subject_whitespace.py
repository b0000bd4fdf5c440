"""fix71 (audit 65 f2): a subject value with white space around it is refused at ingest, and every reader
parses a subject with one function (``ledger.reads.parse_subject_pairs``).

Before, ``POST /v1/entries`` stored ``campaign: "vllm-embed "`` while ``ledger record`` stripped it, the
readers stripped what they were asked and answered about ``vllm-embed`` (QUALIFIED) although the asked
campaign's only launch crashed, and the timeline page judged the raw value. Now ingest refuses it naming the
field (``ledger.entries.subject_problem``), and the CLI, the API's ``?subject=``, the routing check's body and
a timeline's address all refuse it the same way. An entry stored before the rule stays readable."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

import ledger.service as service_mod
from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.canonical import canonical_bytes
from ledger.entries import check_ingest, format_time, subject_problem
from ledger.errors import InputError, SchemaError
from ledger.reads import parse_subject_args, parse_subject_pairs
from ledger.service import Ledger
from ledger.signing import sign_envelope
from ledger.tokens import create_token

PADDED = ["vllm-embed ", " vllm-embed", "vllm-embed\t", "\u00a0vllm-embed", "vllm-embed\n"]
CONTROL = ["vllm\x00embed", "vllm\nembed", "vllm\x07embed", "vllm\x1bembed"]
FINE = ["vllm-embed", "a b  c", "Qwen/Qwen3-4B", "naïve-模型"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Ledger, dict[str, str]]]:
    home = tmp_path_factory.mktemp("ws") / "home"
    ledger = Ledger.init(home)
    ledger.new_key("coll", ["collector"])
    ledger.record("note", {"campaign": "vllm-embed", "host": "gpu-box-1"}, {"text": "trimmed"}, key="coll")
    tokens = {role: create_token(ledger.engine, f"t-{role}", role)[0] for role in ("reader", "writer")}
    app = create_app(ApiSettings(home=str(home)), ledger=ledger)
    with TestClient(app) as client:
        yield client, ledger, tokens
    ledger.close()


def _auth(tokens: dict[str, str], role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens[role]}"}


def _envelope(ledger: Ledger, subject: dict[str, str]) -> dict[str, Any]:
    """A statement signed as a collector signs it, outside the service (which refuses before signing)."""
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


@pytest.mark.parametrize("value", PADDED + CONTROL)
def test_a_padded_subject_value_is_accepted_by_post_entries(
    site: tuple[TestClient, Ledger, dict[str, str]], value: str
) -> None:
    """The failure: POST /v1/entries stored it. Now refused (4xx) naming the field; nothing stored."""
    client, ledger, tokens = site
    size = ledger.size()
    for subject in ({"campaign": value}, {"campaign": "c1", "host": value}):
        r = client.post("/v1/entries", json=_envelope(ledger, subject), headers=_auth(tokens, "writer"))
        assert r.status_code == 422, r.text
        field = next(k for k, v in subject.items() if v == value)
        assert f"subject.{field}" in r.json()["detail"], r.json()["detail"]
    assert ledger.size() == size


@pytest.mark.parametrize("value", FINE)
def test_a_subject_value_without_white_space_around_it_is_still_taken(
    site: tuple[TestClient, Ledger, dict[str, str]], value: str
) -> None:
    client, ledger, tokens = site
    r = client.post(
        "/v1/entries", json=_envelope(ledger, {"campaign": value}), headers=_auth(tokens, "writer")
    )
    assert r.status_code in (200, 201), r.text
    assert parse_subject_args([f"campaign={value}"]) == {"campaign": value}


def test_ledger_record_refuses_it_as_the_api_does(site: tuple[TestClient, Ledger, dict[str, str]]) -> None:
    _, ledger, _ = site
    for value in PADDED + CONTROL:
        with pytest.raises(SchemaError, match=r"subject\.campaign: "):
            ledger.record("note", {"campaign": value}, {"text": "x"}, key="coll")
    assert subject_problem("campaign", "x") is None
    for bad_type in (1, None, ["x"]):
        assert subject_problem("campaign", bad_type) is not None


@pytest.mark.parametrize("value", PADDED + CONTROL)
def test_a_reader_asked_about_a_padded_value_answers_another_subject(
    site: tuple[TestClient, Ledger, dict[str, str]], value: str
) -> None:
    """The failure: readers stripped the asked value and answered about ``vllm-embed``. Now every reader
    refuses it naming the field: the CLI's parser, ``?subject=`` (verdict, entries, the verdict page), a
    routing check's body and a timeline's address."""
    client, _, tokens = site
    with pytest.raises(InputError, match=r"campaign="):
        parse_subject_args([f"campaign={value}"])
    with pytest.raises(InputError, match=r"subject\.model="):
        parse_subject_pairs([("model", value)], given_as="subject.")
    rd = _auth(tokens, "reader")
    for path in ("/v1/verdict", "/v1/entries", "/verdict"):
        r = client.get(path, params={"subject": f"campaign={value}"}, headers=rd)
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text[:300])
        assert "campaign" in r.text
    body = {"subject": {"model": value, "host": "gpu-box-1", "backend": "vllm"}}
    r = client.post("/v1/routing-check", json=body, headers=rd)
    assert r.status_code == 422, r.text
    assert "subject.model=" in r.json()["detail"], r.json()["detail"]
    r = client.get("/subjects/campaign/" + quote(value, safe=""), headers=rd)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    r = client.get("/subjects/campaign/", params={"value": value}, headers=rd)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])


def test_the_cli_refuses_a_padded_subject_as_the_api_does(tmp_path: Path) -> None:
    home = tmp_path / "home"
    led = Ledger.init(home)
    led.new_key("coll", ["collector"])
    led.close()
    cli = str(Path(sys.executable).parent / "ledger")
    for argv in (
        ["log", "--subject", "campaign=vllm-embed "],
        ["verdict", "--subject", "campaign=vllm-embed "],
        ["record", "note", "--subject", "campaign=vllm-embed ", "--data", '{"text": "x"}', "--key", "coll"],
    ):
        r = subprocess.run(
            [cli, "--home", str(home), *argv],
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 2, (argv, r.returncode, r.stdout, r.stderr)
        assert "white space around its value" in r.stderr, r.stderr


def test_white_space_around_a_field_name_is_set_aside_but_a_field_twice_is_refused() -> None:
    assert parse_subject_args(["campaign =c1"]) == {"campaign": "c1"}
    with pytest.raises(InputError, match="given twice"):
        parse_subject_args(["campaign =x", "campaign=y"])
    with pytest.raises(InputError, match="must match"):
        parse_subject_args(["Campaign=x"])
    with pytest.raises(InputError, match="FIELD=VALUE"):
        parse_subject_args(["campaign="])


def test_an_entry_stored_padded_before_the_rule_stays_readable(
    site: tuple[TestClient, Ledger, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry stored before ingest refused padded values (made here by appending without the rule) is
    read back, listed and verified; a subject question cannot name it (refused, not a server error)."""
    client, ledger, tokens = site
    monkeypatch.setattr(service_mod, "check_ingest", lambda st: st)
    old = ledger.record("note", {"campaign": "legacy ", "host": "gpu-box-1"}, {"text": "old"}, key="coll")
    monkeypatch.setattr(service_mod, "check_ingest", check_ingest)
    assert ledger.get(old.entry_id).statement.subject["campaign"] == "legacy "
    listed = ledger.query(subject={"host": "gpu-box-1"}, limit=None)
    assert old.entry_id in {e.entry_id for e in listed}
    rd = _auth(tokens, "reader")
    r = client.get("/v1/entries", params={"subject": "host=gpu-box-1"}, headers=rd)
    assert r.status_code == 200 and "legacy " in {i["subject"].get("campaign") for i in r.json()["items"]}
    assert client.get(f"/v1/entries/{old.entry_id}", headers=rd).status_code == 200
    assert client.get("/", headers=rd).status_code == 200  # the subjects page lists it
    r = client.get("/subjects/campaign/" + quote("legacy ", safe=""), headers=rd)
    assert 400 <= r.status_code < 500, r.status_code
    assert client.get("/subjects/campaign/vllm-embed", headers=rd).status_code == 200
