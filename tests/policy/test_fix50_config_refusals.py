"""An engine that refuses the collector (HTTP 401/403: an API key the campaign gives the engine and not the
collector) was blamed on the engine (audit 40, f1 and f2).

f1: llama-cpp-python run with ``--api_key`` refused every readiness request; the collector recorded the launch
as signature ``readiness-refused``, class ``config`` ("the campaign's configuration, not the engine's"), yet
the shipped policy never read the class: NOT QUALIFIED — RUNTIME RELIABILITY ("no engine launch within the
attempt budget of 3 reached API readiness").

f2: an engine whose ``/health`` is open (llama-server, vLLM) became ready; its ``/v1/models`` answered 401
``Invalid API Key`` and api-readiness said "/v1/models did not serve the expected model: the engine is not
serving the model under test": NOT QUALIFIED — RUNTIME RELIABILITY.

Now a launch that never reached readiness only because the engine refused the collector (its signature's
class in ``params.config_classes``) is not credited (``campaign-config-error``) and shows nothing against the
engine; a health probe answered with a status in ``params.refused_http_statuses`` (and not ok; a sequential
run refused from its first request) is not credited (``engine-refused-probe``) and shows nothing against it
either. A gate left without accepted evidence is INCONCLUSIVE, naming the refusal; any other failure the
entry shows (a segfault in its logs, a crash status, a sequential run refused part-way) still counts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from collectors.readiness import REFUSED_STATUSES
from ledger.errors import PolicyError
from ledger.policy.fixtures import run_fixture
from ledger.policy.loader import load_policy
from ledger.service import Ledger
from ledger.signatures import FailureClass, signature_classes

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
FIXTURES = POLICY_DIR / "fixtures" / "backend-qualification"
READINESS = FIXTURES / "readiness-refused.toml"
API = FIXTURES / "api-refused.toml"
NOT_QUALIFIED = "NOT QUALIFIED — RUNTIME RELIABILITY"


def _variant(tmp_path: Path, source: Path, edits: list[tuple[str, str]], tail: str) -> Path:
    """The shipped fixture ``source`` with ``edits`` (each must apply once at least), its expectations
    replaced by ``tail``, written to ``tmp_path``."""
    text = source.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    text = text[: text.index("\n[[verdicts]]")] + "\n" + tail
    out = tmp_path / source.name
    out.write_text(text)
    return out


def _run(path: Path) -> list[str]:
    result = run_fixture(path, POLICY_DIR, Path(tempfile.mkdtemp(prefix="fix50-")), init=Ledger.init)
    assert result.checks, path
    return result.failures


def _verdict(word: str, after: str = "", **gates: str) -> str:
    out = "[[verdicts]]\n"
    if after:
        out += f'after = "{after}"\n'
    out += f'expect.verdict = "{word}"\n'
    if gates:
        listed = ", ".join(f'{k.replace("_", "-")} = "{v}"' for k, v in gates.items())
        out += f"expect.gates = {{ {listed} }}\n"
    return out


def test_engine_refusing_readiness_with_401_is_inconclusive_not_runtime_reliability() -> None:
    """The shipped fixture: the refused launch → INCONCLUSIVE (campaign-config-error); the same refusal
    with a segmentation fault in its log → NOT QUALIFIED."""
    failures = _run(READINESS)
    assert not failures, failures


def test_engine_refusing_v1_models_with_401_is_inconclusive_not_another_model_served() -> None:
    """The shipped fixture: /v1/models answered 401 → INCONCLUSIVE (engine-refused-probe), never "the
    engine is not serving the model under test"; a refused probe beside passing ones is withheld and each
    gate judges the others."""
    failures = _run(API)
    assert not failures, failures


REFUSED_LAUNCH = 'ready = false, exit_code = 0, failure_signature = "readiness-refused"'


@pytest.mark.parametrize(
    ("label", "edits", "word"),
    [
        (
            "the class config, 403 as 401",
            [("HTTP 401 Invalid API key", "HTTP 403 Forbidden")],
            "INCONCLUSIVE",
        ),
        # a crash status beside the refusal is the engine's failure
        (
            "killed by SIGSEGV",
            [(REFUSED_LAUNCH, REFUSED_LAUNCH.replace("exit_code = 0", "signal = 11"))],
            NOT_QUALIFIED,
        ),
        (
            "exit status 139",
            [(REFUSED_LAUNCH, REFUSED_LAUNCH.replace("exit_code = 0", "exit_code = 139"))],
            NOT_QUALIFIED,
        ),
        # the signature is what says refused: misspelled (class unknown) or dropped, the launch fails closed
        ("signature misspelled", [('"readiness-refused"', '"readiness-refusd"')], NOT_QUALIFIED),
        ("signature dropped", [('failure_signature = "readiness-refused", ', "")], NOT_QUALIFIED),
    ],
)
def test_refused_launch_neighbours(
    tmp_path: Path, label: str, edits: list[tuple[str, str]], word: str
) -> None:
    """The first launch of the shipped fixture, changed: only the bare refusal is INCONCLUSIVE."""
    path = _variant(tmp_path, READINESS, edits, _verdict(word, after="launch"))
    failures = _run(path)
    assert not failures, (label, failures)


REFUSED_MODELS = 'check = "models", ok = false, http_status = 401'


@pytest.mark.parametrize(
    ("label", "edits", "word", "api_readiness"),
    [
        ("403 as 401", [(REFUSED_MODELS, REFUSED_MODELS.replace("401", "403"))], "INCONCLUSIVE", "missing"),
        # the refusal is the recorded status: any other failure of the probe is the engine's
        ("HTTP 500", [(REFUSED_MODELS, REFUSED_MODELS.replace("401", "500"))], NOT_QUALIFIED, "failed"),
        ("status dropped", [(REFUSED_MODELS, 'check = "models", ok = false')], NOT_QUALIFIED, "failed"),
        ("HTTP 404", [(REFUSED_MODELS, REFUSED_MODELS.replace("401", "404"))], NOT_QUALIFIED, "failed"),
        # a 401 recorded beside ok = true: the recorded status decides (the probe is not ok), a refusal
        (
            "ok claimed beside 401",
            [(REFUSED_MODELS, REFUSED_MODELS.replace("false", "true"))],
            "INCONCLUSIVE",
            "missing",
        ),
    ],
)
def test_refused_models_probe_neighbours(
    tmp_path: Path, label: str, edits: list[tuple[str, str]], word: str, api_readiness: str
) -> None:
    path = _variant(tmp_path, API, edits, _verdict(word, after="models-refused", api_readiness=api_readiness))
    failures = _run(path)
    assert not failures, (label, failures)


SHARED = POLICY_DIR / "fixtures" / "_shared" / "ready-campaign.toml"
SEQUENTIAL_OK = 'check = "sequential", ok = true, http_status = 200, count = 20'


def _sequential_campaign(tmp_path: Path, payload: str) -> tuple[Path, str]:
    """The shared ready campaign with its sequential run's payload start replaced by ``payload``: the fixture
    file to write and its text (the expectations to be added)."""
    text = SHARED.read_text()
    assert SEQUENTIAL_OK in text
    text = text.replace(SEQUENTIAL_OK, payload)
    head = (API.read_text().split("[[entries]]", 1)[0]).replace(
        'campaign = "vllm-apikey"', 'campaign = "vllm-seq"'
    )
    out = tmp_path / "sequential.toml"
    return out, head + text


@pytest.mark.parametrize(
    ("label", "payload", "word", "gate"),
    [
        (
            "refused from its first request",
            'check = "sequential", ok = false, http_status = 401, count = 0',
            "INCONCLUSIVE",
            "missing",
        ),
        # the engine answered, then refused: it changed its answer mid-run — the engine's failure
        (
            "refused part-way",
            'check = "sequential", ok = false, http_status = 401, count = 5',
            NOT_QUALIFIED,
            "failed",
        ),
        ("count dropped", 'check = "sequential", ok = false, http_status = 401', NOT_QUALIFIED, "failed"),
    ],
)
def test_refused_sequential_run_counts_only_when_refused_from_the_first_request(
    tmp_path: Path, label: str, payload: str, word: str, gate: str
) -> None:
    out, text = _sequential_campaign(tmp_path, payload)
    out.write_text(text + "\n" + _verdict(word, sequential_requests=gate))
    failures = _run(out)
    assert not failures, (label, failures)


def test_policy_refused_statuses_are_the_collectors_and_config_is_the_refusal_signatures_class() -> None:
    """One vocabulary: the policy's refused statuses are the collector's REFUSED_STATUSES, and its
    config_classes the class the signature table gives readiness-refused (FailureClass.CONFIG)."""
    params = load_policy("backend-qualification", POLICY_DIR).params
    assert params["refused_http_statuses"] == list(REFUSED_STATUSES)
    assert params["config_classes"] == [FailureClass.CONFIG.value]
    assert signature_classes()["readiness-refused"] in params["config_classes"]


def test_misspelled_config_class_is_refused_at_load(tmp_path: Path) -> None:
    """config_classes is checked against the closed FailureClass set: a misspelled class would switch
    the exemption off silently."""
    pol = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, pol, ignore=shutil.ignore_patterns("fixtures"))
    acc = pol / "evidence-acceptance.toml"
    text = acc.read_text()
    assert 'config_classes = ["config"]' in text
    acc.write_text(text.replace('config_classes = ["config"]', 'config_classes = ["confg"]'))
    with pytest.raises(PolicyError, match="confg"):
        load_policy("backend-qualification", pol)
