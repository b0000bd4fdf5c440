"""A rejection of an acceptance was recorded and then ignored (audit 38, f2): `ledger accept <acceptance id>
--reject` (exit 0) left the verdict QUALIFIED, listed nowhere, and routing allowed — while a rejection of a
review PASS or of a supersession takes effect.

Now an acceptance is an acting entry an acceptance may reject, as a review and a supersession are: a
rejected acceptance decides nothing (the benchmark it accepted is acceptance-missing: INCONCLUSIVE), and a
rejection of a rejection reinstates what that rejection took out, as a supersession of a supersession does."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from ledger.policy.fixtures import run_fixture
from ledger.service import Ledger

REPO = Path(__file__).resolve().parents[2]
POLICY_DIR = REPO / "policies"
FIXTURE = POLICY_DIR / "fixtures" / "backend-qualification" / "rejected-acceptance.toml"
SHARED = POLICY_DIR / "fixtures" / "_shared"

REJECTION = """[[entries]]
name = "acceptance-rejected"
kind = "acceptance"
key = "operator2"
at = "2026-09-10T11:00:00Z"
refs = { subject = "benchmark-acceptance" }
payload = { decision = "rejected", reason = "that acceptance was improper: the benchmark is not approved" }
"""
INCONCLUSIVE = """[[verdicts]]
expect.verdict = "INCONCLUSIVE"
expect.gates = { benchmark = "missing" }
expect.rejected = [
  { entry = "benchmark-acceptance", rule = "rejected-by-acceptance" },
  { entry = "benchmark", rule = "acceptance-missing" },
]
"""
QUALIFIED = """[[verdicts]]
expect.verdict = "QUALIFIED"
expect.gates = { benchmark = "passed" }
expect.used = ["benchmark", "benchmark-acceptance"]
"""


def _entry(name: str, kind: str, key: str, at: str, rel: str, target: str, payload: str) -> str:
    return (
        f'[[entries]]\nname = "{name}"\nkind = "{kind}"\nkey = "{key}"\nat = "{at}"\n'
        f'refs = {{ {rel} = "{target}" }}\npayload = {payload}\n'
    )


def _run(tmp_path: Path, entries: str, tail: str, rejection: str = REJECTION) -> list[str]:
    """The shipped fixture's campaign (the qualified one) with ``rejection`` and ``entries`` after it, and
    ``tail``'s expectations."""
    text = FIXTURE.read_text().replace('"../_shared/', f'"{SHARED}/')
    head = text[: text.index('[[entries]]\nname = "acceptance-rejected"')]
    path = tmp_path / "variant.toml"
    path.write_text(head + rejection + "\n" + entries + "\n" + tail)
    result = run_fixture(path, POLICY_DIR, Path(tempfile.mkdtemp(dir=tmp_path)), init=Ledger.init)
    assert result.checks
    return result.failures


def test_rejected_acceptance_decides_nothing_and_a_rejected_rejection_reinstates_it() -> None:
    """The shipped fixture: INCONCLUSIVE once the acceptance is rejected; QUALIFIED once that rejection is
    rejected in turn."""
    result = run_fixture(FIXTURE, POLICY_DIR, init=Ledger.init)
    assert result.passed, result.failures


@pytest.mark.parametrize(
    ("label", "rejection"),
    [
        ("by another key", REJECTION),
        # a rejection by any key counts — the key that accepted withdrawing its own acceptance too
        ("by the key that accepted", REJECTION.replace('key = "operator2"', 'key = "operator"')),
        # a reviewer may reject it as well (acceptance signers: reviewer, operator)
        ("by a reviewer", REJECTION.replace('key = "operator2"', 'key = "reviewer"')),
    ],
)
def test_a_rejected_acceptance_leaves_the_benchmark_without_acceptance(
    tmp_path: Path, label: str, rejection: str
) -> None:
    failures = _run(tmp_path, "", INCONCLUSIVE, rejection)
    assert not failures, (label, failures)


def test_a_rejection_superseded_with_its_reason_rejects_nothing(tmp_path: Path) -> None:
    superseded = _entry(
        "rejection-withdrawn", "supersession", "operator3", "2026-09-10T11:10:00Z", "supersedes",
        "acceptance-rejected", '{ reason = "recorded against the wrong acceptance" }',
    )  # fmt: skip
    failures = _run(tmp_path, superseded, QUALIFIED)
    assert not failures, failures


def test_an_acceptance_of_the_rejection_keeps_it_in_force(tmp_path: Path) -> None:
    """An acceptance of a rejection confirms it: the benchmark's acceptance stays rejected (by another key,
    or by the rejection's own key — which decides nothing in its favour, and the rejection stands anyway)."""
    for key in ("operator3", "operator2"):
        confirmed = _entry(
            "rejection-confirmed", "acceptance", key, "2026-09-10T11:10:00Z", "subject",
            "acceptance-rejected", '{ decision = "accepted", reason = "the benchmark is not approved" }',
        )  # fmt: skip
        (tmp_path / key).mkdir()
        failures = _run(tmp_path / key, confirmed, INCONCLUSIVE)
        assert not failures, (key, failures)


def test_a_later_acceptance_of_the_acceptance_by_another_key_decides_it_again(tmp_path: Path) -> None:
    """The latest independent decision of an entry decides it, as for evidence: a later acceptance of the
    rejected acceptance (by a third key) reinstates it; by the acceptance's own key it decides nothing."""
    again = _entry(
        "acceptance-upheld", "acceptance", "operator3", "2026-09-10T11:10:00Z", "subject",
        "benchmark-acceptance", '{ decision = "accepted", reason = "approved after all (change 1234)" }',
    )  # fmt: skip
    (tmp_path / "other").mkdir()
    assert not _run(tmp_path / "other", again, QUALIFIED)
    (tmp_path / "own").mkdir()
    own = again.replace('key = "operator3"', 'key = "operator"')
    assert not _run(tmp_path / "own", own, INCONCLUSIVE)


def test_a_rejection_of_a_rejection_of_a_rejection_rejects_again(tmp_path: Path) -> None:
    """Each rejection is decided by those after it (the log is walked from its end): three in a row leave
    the first one in force."""
    chain = _entry(
        "rejection-rejected", "acceptance", "operator3", "2026-09-10T11:10:00Z", "subject",
        "acceptance-rejected", '{ decision = "rejected", reason = "the rejection was a mistake" }',
    ) + "\n" + _entry(
        "third", "acceptance", "reviewer", "2026-09-10T11:20:00Z", "subject",
        "rejection-rejected", '{ decision = "rejected", reason = "it was no mistake" }',
    )  # fmt: skip
    failures = _run(tmp_path, chain, INCONCLUSIVE)
    assert not failures, failures


def test_a_verdict_recorded_before_the_rejection_no_longer_routes(tmp_path: Path) -> None:
    """Routing judges the acceptance the recorded QUALIFIED relied on with the same rule (``taken_out``): a
    rejection of that acceptance logged after the verdict takes it out, and the route is refused."""
    recorded = (
        '[[entries]]\nname = "verdict"\nat = "2026-09-10T10:55:00Z"\n'
        'record_verdict = { subject = { campaign = "vllm-embed" }, key = "reviewer" }\n'
    )
    check = (
        '[[checks]]\nsubject = { backend = "vllm", model = "Qwen3-Embedding-8B", host = "gpu-box-1" }\n'
        'now = "2026-09-11T09:00:00Z"\nexpect.allowed = false\n'
        '[checks.deployment]\nhost = "gpu-box-1"\nservices = [{ name = "vllm-embed", engine = "vllm", '
        'model = "Qwen3-Embedding-8B", gpus = [2], gpu_memory_utilization = 0.25 }]\n'
    )
    failures = _run(tmp_path, recorded, INCONCLUSIVE + "\n" + check)
    assert not failures, failures
    # the neighbour: without the rejection, the same route is allowed
    (tmp_path / "none").mkdir()
    allowed = check.replace("expect.allowed = false", "expect.allowed = true")
    failures = _run(tmp_path / "none", recorded, QUALIFIED + "\n" + allowed, rejection="")
    assert not failures, failures
