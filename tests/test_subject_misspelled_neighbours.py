"""Audit 78 f2: the misspelled-subject-field rule (audit 75 f2) refused legitimate fields —
``ledger record --subject deployment_id=dep-42`` and ``--subject mode=offline`` exited 2 as misspellings of
``deployment`` and ``model`` (``_loose`` dropped the ``_``, leaving ``deploymentid`` two edits from a
ten-letter key; ``mode`` is one edit from ``model``), and so were ``ghost`` and ``most`` (``host``). Now
``ledger.entries.misspelling_of`` reads a key that adds a word after a separator as another key
(``_adds_a_word``), and for subject fields one edit that makes another word of a short field (``_edge_word``:
a letter before the first, the first replaced, the last dropped) as another field; every slip the rule was
made for is refused as before, and a plural of a subject field is refused saying so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ledger.entries import (
    misspelled_subject_field,
    misspelled_subject_words,
    misspelling_of,
    subject_problem,
)
from ledger.errors import SchemaError
from ledger.service import Ledger
from tests.policy.test_misspelled_binding_close import COMPARED
from tests.test_subject_misspelled import CAMPAIGN_ONLY, _stored_before_the_rule

# legitimate fields the rule refused (audit 78 f2) and their neighbours: a known field with a word added after
# (or before) a separator, and short words one edge edit from a known field
ADDS_A_WORD = [
    "deployment_id",
    "deployment.id",
    "deployment-name",
    "engine_id",
    "host_name",
    "host_2",
    "primary_host",
    "model_name",
    "model_id",
    "job_id",
    "commit_sha",
    "campaign_group",
    "backend_build",
]
OTHER_WORDS = ["mode", "ghost", "most", "hostname", "region", "zone", "node", "gpu"]
# slips of a known field, refused as before
SLIPS = [
    ("hots", "host"),  # two letters swapped, at the end
    ("hsot", "host"),
    ("ohst", "host"),  # two letters swapped, at the start
    ("hst", "host"),  # a letter dropped inside
    ("hhost", "host"),  # a letter doubled, at the start
    ("hostt", "host"),  # a letter doubled, at the end
    ("hostr", "host"),  # a letter appended
    ("hosr", "host"),  # the last letter replaced
    ("ost", "host"),  # the first letter dropped
    ("modle", "model"),
    ("mdoel", "model"),
    ("modell", "model"),
    ("modes", "model"),  # the last letter replaced: fail closed, though it is the plural of mode
    ("bakend", "backend"),
    ("comit", "commit"),
    ("campain", "campaign"),
    ("deploymnet", "deployment"),
    ("jbo", "job"),
    ("backend_verison", "backend_version"),  # ``backend`` splits off, but the rest misspells backend_version
    ("deploymentid", "deployment"),  # no separator: two letters added to a long field read as a slip
]
# the same but for case, separators, whitespace: no edit at all (the subject key pattern refuses some first)
NO_EDIT = [
    ("back_end", "backend"),
    ("back-end", "backend"),
    ("Backend", "backend"),
    ("Host", "host"),
    ("HOST", "host"),
    ("host_", "host"),
    ("_host", "host"),
    ("host.", "host"),
    ("host ", "host"),
    ("backendversion", "backend_version"),
]
PLURALS = [
    ("hosts", "host"),
    ("models", "model"),
    ("deployments", "deployment"),
    ("commits", "commit"),
    ("jobs", "job"),
    ("campaigns", "campaign"),
    ("backend_versions", "backend_version"),
]


@pytest.mark.parametrize("field", ADDS_A_WORD)
def test_a_known_field_with_a_word_added_after_a_separator_is_another_field(field: str) -> None:
    """The failure: ``deployment_id`` was refused as a misspelling of ``deployment``."""
    assert misspelled_subject_field(field) is None
    assert subject_problem(field, "dep-42") is None


@pytest.mark.parametrize("field", OTHER_WORDS)
def test_another_word_one_edit_from_a_short_field_is_another_field(field: str) -> None:
    """The failure: ``mode`` was refused as ``model``, ``ghost`` and ``most`` as ``host``."""
    assert misspelled_subject_field(field) is None
    assert subject_problem(field, "offline") is None


@pytest.mark.parametrize(("spelled", "known"), SLIPS)
def test_a_slip_of_a_known_field_is_still_refused(spelled: str, known: str) -> None:
    """Neighbour (must still fail): fail closed, a misspelling read as absent hid a split (audit 75 f2)."""
    assert misspelled_subject_field(spelled) == known
    problem = subject_problem(spelled, "gpu-box-2")
    assert problem is not None and f"{spelled!r} misspells the subject field {known!r}" in problem, problem
    assert "plural" not in problem


@pytest.mark.parametrize(("spelled", "known"), NO_EDIT)
def test_a_known_field_but_for_case_or_separators_is_refused(spelled: str, known: str) -> None:
    """A separator with no word beyond it (``host_``) adds nothing; parts that only spell the field again
    (``back_end``) add no word."""
    assert misspelled_subject_field(spelled) == known
    assert subject_problem(spelled, "gpu-box-2") is not None


@pytest.mark.parametrize("spelled", ["\u04bbost", "h\u043est"])  # Cyrillic shha, Cyrillic o
def test_a_look_alike_letter_is_refused_and_never_another_word(spelled: str) -> None:
    """``һost`` differs from ``host`` at its first letter, an edge edit, but a non-ASCII letter is a
    look-alike, never another word: ``misspelled_subject_field`` names host, and the key pattern refuses
    it."""
    assert misspelled_subject_field(spelled) == "host"
    problem = subject_problem(spelled, "gpu-box-2")
    assert problem is not None and "must match" in problem


@pytest.mark.parametrize(("spelled", "known"), PLURALS)
def test_a_plural_of_a_subject_field_is_refused_as_a_plural(spelled: str, known: str) -> None:
    """Decided: a plural is refused (fail closed), its message saying it is the plural of a subject field —
    a subject names one host; an entry naming ``hosts=`` would leave ``host`` out."""
    assert misspelled_subject_field(spelled) == known
    problem = subject_problem(spelled, "a")
    assert problem is not None and "plural of a subject field" in problem, problem
    assert f"{spelled!r} misspells the subject field {known!r}" in problem
    assert "plural" in misspelled_subject_words(spelled, known)
    assert "plural" not in misspelled_subject_words("hots", "host")


def test_the_known_fields_themselves_pass() -> None:
    for field in ("campaign", "backend", "backend_version", "model", "host", "deployment", "job", "commit"):
        assert misspelled_subject_field(field) is None and subject_problem(field, "x") is None


# --- the binding keys: the same function, without the subject fields' other words --------------------------


@pytest.mark.parametrize(
    ("key", "meant"), [("engin", "engine"), ("adapte", "adapter"), ("nengine", "engine")]
)
def test_a_binding_key_one_edge_edit_away_is_still_a_misspelling(key: str, meant: str) -> None:
    """Neighbour: a binding key has no such words; ``engin`` left unpinned would let any engine pass."""
    assert misspelling_of(key, COMPARED) == meant
    assert misspelling_of(key, COMPARED, edge_words=True) is None


@pytest.mark.parametrize("key", ["engine_x", "engine_id", "model_repo_url", "adapter.name"])
def test_a_binding_key_with_a_word_added_after_a_separator_is_another_key(key: str) -> None:
    assert misspelling_of(key, COMPARED) is None


@pytest.mark.parametrize(
    ("key", "meant"),
    [("engine_versio", "engine_version"), ("engine_verison", "engine_version"), ("engine_", "engine")],
)
def test_a_binding_key_whose_rest_misspells_a_longer_key_is_still_refused(key: str, meant: str) -> None:
    """``engine`` splits off ``engine_verison``, but the rest misspells ``engine_version``: a misspelling."""
    assert misspelling_of(key, COMPARED) == meant


# --- the reproducer: the CLI and ingest, and entries stored before ---------------------------------------


def test_the_cli_records_deployment_id_and_mode(tmp_path: Path) -> None:
    """Audit 78 f2's reproducer: ``record --subject deployment_id=dep-42`` and ``mode=offline`` exit 0."""
    home = tmp_path / "home"
    led = Ledger.init(home)
    led.new_key("coll", ["collector"])
    led.close()
    cli = str(Path(sys.executable).parent / "ledger")
    base = [cli, "--home", str(home), "record", "note", "--subject", "campaign=c1", "--data", '{"text": "x"}']
    for field in ("region=eu-west", "engine_id=e1", "deployment_id=dep-42", "mode=offline", "ghost=g"):
        r = subprocess.run(
            [*base, "--subject", field, "--key", "coll"], capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, (field, r.stdout, r.stderr)
    for field, known in (("hosts=a", "host"), ("hots=a", "host"), ("deploymnet=d", "deployment")):
        r = subprocess.run(
            [*base, "--subject", field, "--key", "coll"], capture_output=True, text=True, check=False
        )
        assert r.returncode == 2, (field, r.stdout, r.stderr)
        assert f"misspells the subject field {known!r}" in r.stderr, r.stderr


def test_ingest_takes_deployment_id_and_refuses_a_plural(tmp_path: Path) -> None:
    led = Ledger.init(tmp_path / "home")
    try:
        led.new_key("coll", ["collector"])
        led.record(
            "note",
            {"campaign": "c1", "deployment_id": "dep-42", "mode": "offline"},
            {"text": "x"},
            key="coll",
        )
        with pytest.raises(SchemaError, match=r"plural of a subject field"):
            led.record("note", {"campaign": "c1", "hosts": "a"}, {"text": "x"}, key="coll")
    finally:
        led.close()


@pytest.mark.parametrize("field", ["mode", "deployment_id", "host_name"])
def test_a_campaign_with_another_field_stored_stays_qualified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str
) -> None:
    """The verdict reads stored entries with the same rule (``verdict._misspelled``): another field is no
    ``misspelled`` item, the engine's entries leaving host out say nothing of another machine."""
    v, stored = _stored_before_the_rule(tmp_path, monkeypatch, field, CAMPAIGN_ONLY)
    assert stored["launch"][field] == "gpu-box-2"
    assert v["verdict"] == "QUALIFIED", v.get("claims")


def test_a_campaign_with_a_plural_host_stored_is_not_qualified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbour (must still fail): ``hosts=gpu-box-2`` stored before the rule is a ``misspelled`` item."""
    v, _ = _stored_before_the_rule(tmp_path, monkeypatch, "hosts", CAMPAIGN_ONLY)
    assert v["verdict"] == "INCONCLUSIVE"
    assert [(c["field"], c["status"], c["spelled"]) for c in v["claims"]] == [("host", "misspelled", "hosts")]
