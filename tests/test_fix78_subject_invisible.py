"""fix78 (audit 69 f1): a subject value with an invisible character in it, or not in Unicode normal form
NFC, is refused at ingest and by every reader, as one with white space around it is (fix71).

Before, ``ledger record --subject campaign=vllm-embed<U+200B>`` (U+FEFF, U+2060, U+00AD, U+200E, U+180E
alike) was stored: ``ledger log`` printed it as ``campaign=vllm-embed`` while ``--subject
campaign=vllm-embed`` found 1 of 7 notes — a crash so recorded dropped out of the campaign's verdict; and
``café`` written decomposed (``e`` + U+0301) was another subject than ``café``. Now
``ledger.entries.subject_problem`` refuses a format character (Unicode category Cf) or a filler that
shows nothing anywhere in a value, and a value that is not NFC, naming the field, the code point and the
fix."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.canonical import canonical_bytes
from ledger.entries import format_time, subject_problem
from ledger.errors import InputError, SchemaError
from ledger.reads import parse_subject_args, parse_subject_pairs
from ledger.service import Ledger
from ledger.signing import sign_envelope
from ledger.tokens import create_token

# the audit's code points: zero-width space, BOM, word joiner, soft hyphen, left-to-right mark, Mongolian
# vowel separator — each a format character (Cf) that no reader sees
AUDITED = ["\u200b", "\ufeff", "\u2060", "\u00ad", "\u200e", "\u180e"]
# neighbours: other format characters (joiners, bidi controls, an invisible operator, a tag) and fillers
NEIGHBOURS = ["\u200c", "\u200d", "\u202e", "\u2066", "\u2062", "\U000e0041", "\u3164", "\u2800"]


def _placed(c: str) -> list[str]:
    return [f"{c}vllm-embed", f"vllm{c}-embed", f"vllm-embed{c}"]


INVISIBLE = [v for c in AUDITED + NEIGHBOURS for v in _placed(c)]
NFD = ["cafe\u0301", "Cafe\u0301-bench", "\u1100\u1161"]  # é decomposed; 가 as conjoining jamo
LINE_BREAKS = ["vllm\u2028embed", "vllm\u2029embed"]
FINE = ["vllm-embed", "Qwen3-Embedding-8B", "模型", "café", "naïve-模型", "Ωmega", "가나", "a b  c"]


def _id(value: str) -> str:
    return ascii(value)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Ledger, dict[str, str]]]:
    home = tmp_path_factory.mktemp("inv") / "home"
    ledger = Ledger.init(home)
    ledger.new_key("coll", ["collector"])
    ledger.record("note", {"campaign": "vllm-embed", "host": "gpu-box-1"}, {"text": "ok"}, key="coll")
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
        "payload": {"text": "crash seen"},
        "artifacts": [],
        "refs": [],
        "collected_at": format_time(datetime.now(UTC)),
        "collector": {"host": "h", "tool": "evidence-ledger", "version": "x"},
    }
    return sign_envelope(json.loads(canonical_bytes(st)), ledger.signing_key("coll")).to_json()


@pytest.mark.parametrize("value", INVISIBLE, ids=_id)
def test_an_invisible_character_in_a_subject_value_was_accepted(value: str) -> None:
    """The failure: accepted. Now refused naming the field, the code point and the value to write."""
    problem = subject_problem("campaign", value)
    assert problem is not None
    c = next(ch for ch in value if ch not in "vllm-embed")
    assert problem.startswith("subject campaign=")
    assert f"U+{ord(c):04X} {unicodedata.name(c)}" in problem, problem
    assert "write campaign=vllm-embed" in problem, problem


@pytest.mark.parametrize("value", NFD, ids=_id)
def test_a_decomposed_subject_value_was_another_subject(value: str) -> None:
    problem = subject_problem("model", value)
    assert problem is not None and "not in Unicode normal form NFC" in problem, problem
    assert f"write model={unicodedata.normalize('NFC', value)}" in problem, problem
    assert subject_problem("model", unicodedata.normalize("NFC", value)) is None


@pytest.mark.parametrize("value", LINE_BREAKS, ids=_id)
def test_a_line_break_inside_a_subject_value_was_accepted(value: str) -> None:
    problem = subject_problem("campaign", value)
    assert problem is not None and "a value is one line of text" in problem, problem


def test_a_value_of_invisible_characters_only_is_refused_with_no_value_to_write() -> None:
    for value in ("\u200b", "\u200b\ufeff", "\u3164"):
        problem = subject_problem("campaign", value)
        assert problem is not None and "remove it" in problem and "write campaign=" not in problem
    problem = subject_problem("campaign", "\u200b x")  # without it, white space is left around the value
    assert problem is not None and "remove it" in problem


@pytest.mark.parametrize("value", INVISIBLE[:18] + NFD + LINE_BREAKS, ids=_id)
def test_post_entries_refuses_it_naming_the_field(
    site: tuple[TestClient, Ledger, dict[str, str]], value: str
) -> None:
    client, ledger, tokens = site
    size = ledger.size()
    for subject in ({"campaign": value}, {"campaign": "c1", "host": value}):
        r = client.post("/v1/entries", json=_envelope(ledger, subject), headers=_auth(tokens, "writer"))
        assert r.status_code == 422, r.text
        field = next(k for k, v in subject.items() if v == value)
        assert f"subject.{field}" in r.json()["detail"], r.json()["detail"]
    assert ledger.size() == size


@pytest.mark.parametrize("value", FINE, ids=_id)
def test_ordinary_letters_are_still_taken(
    site: tuple[TestClient, Ledger, dict[str, str]], value: str
) -> None:
    client, ledger, tokens = site
    assert unicodedata.is_normalized("NFC", value)
    r = client.post(
        "/v1/entries", json=_envelope(ledger, {"campaign": value}), headers=_auth(tokens, "writer")
    )
    assert r.status_code in (200, 201), r.text
    assert parse_subject_args([f"campaign={value}"]) == {"campaign": value}
    assert subject_problem("campaign", value) is None


def test_ledger_record_refuses_it_as_the_api_does(site: tuple[TestClient, Ledger, dict[str, str]]) -> None:
    _, ledger, _ = site
    size = ledger.size()
    for value in INVISIBLE + NFD + LINE_BREAKS:
        with pytest.raises(SchemaError, match=r"subject\.campaign: "):
            ledger.record("note", {"campaign": value}, {"text": "x"}, key="coll")
        with pytest.raises(SchemaError, match=r"subject\.host: "):
            ledger.record("note", {"campaign": "c1", "host": value}, {"text": "x"}, key="coll")
    assert ledger.size() == size


@pytest.mark.parametrize(
    "value", [*_placed("\u200b"), *_placed("\ufeff"), "vllm-embed\u00ad", NFD[0]], ids=_id
)
def test_a_reader_asked_about_it_answers_another_subject(
    site: tuple[TestClient, Ledger, dict[str, str]], value: str
) -> None:
    """Every reader refuses it naming the field: the CLI's parser, ``?subject=`` (verdict, entries, the
    verdict page), a routing check's body and a timeline's address."""
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


def test_the_cli_records_one_campaign_where_a_reader_sees_one(tmp_path: Path) -> None:
    """The reproducer's shape: notes under ``campaign=vllm-embed`` with an invisible character are refused
    (exit 2, the code point named); the one plain note is the only one ``ledger log`` lists, and
    ``--subject campaign=vllm-embed`` finds it; asking with the invisible character is refused too."""
    home = tmp_path / "home"
    led = Ledger.init(home)
    led.new_key("coll", ["collector"])
    led.close()
    cli = str(Path(sys.executable).parent / "ledger")

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, "--home", str(home), *argv], capture_output=True, text=True, check=False)

    for c in AUDITED:
        value = "\ufeffvllm-embed" if c == "\ufeff" else f"vllm-embed{c}"
        r = run(
            "record",
            "note",
            "-s",
            f"campaign={value}",
            "-s",
            "host=gpu-box-1",
            "--data",
            '{"text": "x"}',
            "--key",
            "coll",
        )
        assert r.returncode == 2, (ascii(value), r.stdout, r.stderr)
        assert f"U+{ord(c):04X}" in r.stderr, r.stderr
        r = run("log", "--subject", f"campaign={value}")
        assert r.returncode == 2 and f"U+{ord(c):04X}" in r.stderr, r.stderr
    r = run("record", "note", "-s", "campaign=cafe\u0301", "--data", '{"text": "x"}', "--key", "coll")
    assert r.returncode == 2 and "NFC" in r.stderr, r.stderr
    r = run("record", "note", "-s", "campaign=vllm-embed", "--data", '{"text": "ok"}', "--key", "coll")
    assert r.returncode == 0, r.stderr
    everything = run("log", "--kind", "note")
    asked = run("log", "--kind", "note", "--subject", "campaign=vllm-embed")
    assert everything.returncode == 0 and asked.returncode == 0, (everything.stderr, asked.stderr)
    assert len(everything.stdout.splitlines()) == len(asked.stdout.splitlines()) == 1, everything.stdout
