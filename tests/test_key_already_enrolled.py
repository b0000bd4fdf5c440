"""Enrolling a public key the keyring already holds is its own error (audit F4): it was
``error[schema-violation]`` with the hint "check the payload against its kind's schema" — the payload is well
formed, the key is the problem. Now ``key-already-enrolled``, naming the name it is enrolled under, with a
hint to ``ledger keys list``; over HTTP a 409 (it conflicts with the log), and nothing is appended."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.errors import status_for
from ledger.api.settings import ApiSettings
from ledger.errors import InputError, KeyAlreadyEnrolledError, SchemaError
from ledger.service import Ledger
from ledger.signing import SigningKey
from ledger.tokens import create_token


def test_enrolling_a_key_again_under_another_name_says_key_already_enrolled(cli: Any, home: Path) -> None:
    assert cli("init").code == 0
    assert cli("keys", "new", "hostA", "--role", "collector").code == 0
    public = cli("keys", "export", "hostA").out.strip()
    before = cli("log", "--json").json()["items"]
    r = cli("keys", "enrol", "hostA-again", "--public-key", public, "--role", "collector")
    assert r.code == 2
    [line] = r.err.splitlines()
    assert line.startswith("error[key-already-enrolled]: key "), line
    assert "already enrolled as 'hostA'" in line
    assert "`ledger keys list`" in line and "kinds --json" not in line
    assert cli("log", "--json").json()["items"] == before  # nothing appended


def test_the_json_error_carries_the_code_and_hint(cli: Any) -> None:
    assert cli("init").code == 0
    assert cli("keys", "new", "hostA", "--role", "collector").code == 0
    public = cli("keys", "export", "hostA").out.strip()
    r = cli("keys", "enrol", "hostA", "--public-key", public, "--role", "collector", "--json")
    assert r.code == 2
    error = json.loads(r.err)["error"]
    assert error["code"] == "key-already-enrolled"
    assert "ledger keys list" in error["hint"]


def test_the_error_is_bad_input_not_a_schema_violation_and_maps_to_409() -> None:
    e = KeyAlreadyEnrolledError("key k is already enrolled as 'a'")
    assert isinstance(e, InputError) and not isinstance(e, SchemaError)
    assert e.code == "key-already-enrolled"
    assert status_for(e) == 409


def test_a_key_id_that_does_not_match_its_public_key_is_still_a_schema_violation(ledger: Ledger) -> None:
    pub = SigningKey.generate("x").public
    other = SigningKey.generate("y").public
    payload = {"name": "x", "public_key": pub.b64, "key_id": other.key_id, "roles": ["collector"]}
    with pytest.raises(SchemaError) as caught:
        ledger.record("key.enrol", {"key": "x"}, payload, key=ledger.admin_key_name)
    assert not isinstance(caught.value, KeyAlreadyEnrolledError)


def test_a_new_key_enrols_and_a_taken_name_keeps_its_own_error(ledger: Ledger) -> None:
    ledger.new_key("hostA", ["collector"])
    with pytest.raises(InputError) as caught:
        ledger.new_key("hostA", ["collector"])
    assert not isinstance(caught.value, KeyAlreadyEnrolledError)  # a name, not a key, is taken
    fresh = SigningKey.generate("hostB")
    ledger.enrol_key("hostB", fresh.public.b64, ["collector"])
    assert ledger.key_record("hostB").public == fresh.public


@pytest.fixture
def api(ledger: Ledger, home: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    token, _ = create_token(ledger.engine, "test-writer", "writer")
    app = create_app(ApiSettings(home=str(home)), ledger=ledger)
    with TestClient(app) as client:
        yield client, {"Authorization": f"Bearer {token}"}


def test_posting_a_duplicate_key_enrol_entry_answers_409(
    ledger: Ledger, api: tuple[TestClient, dict[str, str]]
) -> None:
    client, headers = api
    rec = ledger.new_key("hostA", ["collector"])
    payload = {
        "name": "hostA-again",
        "public_key": rec.public.b64,
        "key_id": rec.key_id,
        "roles": ["collector"],
    }
    st = ledger.make_statement("key.enrol", {"key": "hostA-again"}, payload, refs=[], artifacts=[])
    env = ledger.sign(st, ledger.admin_key_name).to_json()
    size = ledger.size()
    r = client.post("/v1/entries", json=env, headers=headers)
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["code"] == "key-already-enrolled"
    assert "already enrolled as 'hostA'" in body["detail"]
    assert "ledger keys list" in body["hint"]
    assert ledger.size() == size


def test_the_error_type_page_describes_the_code(api: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = api
    page = client.get("/errors/key-already-enrolled")
    assert page.status_code == 200
    assert "409" in page.text and "ledger keys list" in page.text
