"""Fix 118 (issue 11): llama-cpp-python's streamed context overflow, end to end.

A streamed request whose prompt the campaign's ``--n_ctx`` cannot hold gets HTTP 200 and then no event
stream: llama-cpp-python 0.3.36 raises inside the stream, and uvicorn logs "Exception in ASGI application"
(signature server-unhandled-exception, class runtime-fault) with a traceback ending in "ValueError:
Requested tokens (N) exceed context window of M".

* ``ledger collect run`` did not pass the launched context to the harnesses (``_gate_benchmark``,
  ``_gate_semantic``): such a request was never sized, and counted as the engine's fault.
* The ASGI exception decided runtime-stability whatever was recorded. The signature table now says, in its
  ``[[explanation]]`` section, which recorded refusal explains which graver line, one occurrence at a time
  (``ledger.signatures.explanations``, ``occurrences``, ``explained_by_refusals``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import ConfigError
from ledger.signatures import (
    DEFAULT_SIGNATURES,
    Occurrence,
    RunOutcome,
    explained_by_refusals,
    explanations,
    load_signatures,
    occurrences,
)
from tests.policy.test_harness_context_refusal import (
    ACCESS_200,
    BROADCAST,
    OVERFLOW,
    READY,
    asgi,
    sizing_refused,
)

from .conftest import REPO

ASGI_ID = "server-unhandled-exception"
RULE = "llama-cpp-python-streamed-context-overflow"
AFTER = RunOutcome(ready=True)


def _sig(sid: str = ASGI_ID) -> Any:
    return next(s for s in load_signatures() if s.id == sid)


def _found(text: str) -> list[Occurrence]:
    return occurrences(text, _sig(), AFTER, (), explanations())


def _plain(exception: str) -> str:
    """uvicorn's record of an exception of a plain traceback (no exception group)."""
    return (
        "ERROR:    Exception in ASGI application\n"
        "Traceback (most recent call last):\n"
        '  File "/e/llama_cpp/llama.py", line 1346, in _create_completion\n'
        "    raise ValueError(\n"
        f"{exception}\n"
    )


# ---------------------------------------------------------------- the table: [[explanation]]
def test_the_shipped_table_explains_the_asgi_exception_by_a_context_refusal() -> None:
    [rule] = explanations()
    assert (rule.id, rule.explains, rule.refusal) == (RULE, ASGI_ID, "context")
    assert _sig().failure_class.value == "runtime-fault"  # the line is still graver than a config refusal


def _table(tmp_path: Path, explanation: str) -> Path:
    p = tmp_path / "signatures.toml"
    p.write_text(DEFAULT_SIGNATURES.read_text(encoding="utf-8").split("[[explanation]]")[0] + explanation)
    return p


GOOD = (
    '[[explanation]]\nid = "x"\nexplains = "server-unhandled-exception"\nrefusal = "context"\n'
    "shows = 'Requested tokens \\((?P<tokens>\\d+)\\) exceed context window of (?P<window>\\d+)'\n"
)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        pytest.param(("explains = ", "explain = "), "unknown field", id="field-renamed"),
        pytest.param(('refusal = "context"\n', ""), "missing field", id="field-dropped"),
        pytest.param(
            ('"server-unhandled-exception"', '"no-such-signature"'), "no signature", id="unknown-sig"
        ),
        pytest.param(('"server-unhandled-exception"', '"abort"'), "no signature", id="status-only-sig"),
        pytest.param(('"context"', '"access"'), "only 'context'", id="another-refusal"),
        pytest.param(('refusal = "context"', "refusal = 1"), "only 'context'", id="refusal-mistyped"),
        pytest.param(("?P<window>", "?P<ctx>"), "groups", id="group-renamed"),
        pytest.param(("(?P<tokens>", "((?P<tokens>"), "bad shows pattern", id="bad-pattern"),
        pytest.param(('id = "x"', 'id = "X Y"'), "kebab-case", id="bad-id"),
    ],
)
def test_a_malformed_explanation_is_the_tables_error(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    p = _table(tmp_path, GOOD.replace(*edit))
    with pytest.raises(ConfigError, match=message):
        explanations(p)


def test_duplicate_explanations_are_the_tables_error(tmp_path: Path) -> None:
    assert len(explanations(_table(tmp_path, GOOD))) == 1
    with pytest.raises(ConfigError, match="duplicate"):
        explanations(_table(tmp_path, GOOD + GOOD))


def test_a_table_without_explanations_explains_nothing(tmp_path: Path) -> None:
    assert explanations(_table(tmp_path, "")) == ()


# ---------------------------------------------------------------- one occurrence, its own traceback
@pytest.mark.parametrize("record", [asgi, _plain], ids=["exception-group", "plain-traceback"])
def test_an_occurrence_whose_traceback_shows_the_overflow_is_explained_with_its_numbers(record: Any) -> None:
    [occ] = _found(READY + record(OVERFLOW) + ACCESS_200)
    assert (occ.explanation, occ.tokens, occ.window) == (RULE, 471, 256)


@pytest.mark.parametrize("record", [asgi, _plain], ids=["exception-group", "plain-traceback"])
def test_the_next_records_overflow_line_does_not_explain_a_broadcast(record: Any) -> None:
    """The sizing request's own "Exception: Requested tokens …" and traceback follow the broadcast's
    record: they are another record's, never this occurrence's."""
    [occ] = _found(READY + record(BROADCAST) + sizing_refused())
    assert occ.explanation is None


def test_each_occurrence_is_judged_by_its_own_traceback() -> None:
    found = _found(READY + asgi(OVERFLOW) + ACCESS_200 + asgi(BROADCAST) + asgi(OVERFLOW))
    assert [o.explanation for o in found] == [RULE, None, RULE]


def test_an_occurrence_without_a_traceback_is_not_explained() -> None:
    [occ] = _found(READY + "ERROR:    Exception in ASGI application\n" + OVERFLOW + "\n")
    assert occ.explanation is None  # an unindented line straight after the head: no traceback of its own


def test_a_chained_traceback_is_read_through_its_chain_line() -> None:
    chained = _plain(BROADCAST) + "\nDuring handling of the above exception, another exception occurred:\n\n"
    chained += 'Traceback (most recent call last):\n  File "x", line 1, in y\n' + OVERFLOW + "\n"
    [occ] = _found(READY + chained)
    assert occ.explanation == RULE


def test_an_overflow_quoted_in_an_echoed_line_is_no_occurrence_of_the_engine() -> None:
    echo = "INFO 12-06 17:35:54 [request_logger.py:55] Received request x: Exception in ASGI application\n"
    assert _found(READY + echo) == []


def test_no_occurrence_before_readiness() -> None:
    assert occurrences(asgi(OVERFLOW), _sig(), RunOutcome(ready=False), (), explanations()) == []


# ---------------------------------------------------------------- pairing with recorded refusals
def _occ(tokens: int | None = 471, window: int | None = 256, rule: str | None = RULE) -> Occurrence:
    return Occurrence(ASGI_ID, "ERROR:    Exception in ASGI application", rule, tokens, window)


@pytest.mark.parametrize(
    ("found", "refused", "launched", "explained"),
    [
        pytest.param([_occ()], [None], ("--n_ctx", 128), True, id="one-sizing-refused"),
        pytest.param([_occ()], [471], ("--n_ctx", 128), True, id="one-sized-same-tokens"),
        pytest.param([_occ()], [470], ("--n_ctx", 128), False, id="sized-other-tokens"),
        pytest.param([_occ(), _occ()], [None], ("--n_ctx", 128), False, id="two-lines-one-request"),
        pytest.param([_occ(), _occ()], [None, 471], ("--n_ctx", 128), True, id="two-lines-two-requests"),
        pytest.param([_occ(), _occ(rule=None)], [None, None], ("--n_ctx", 128), False, id="one-unexplained"),
        pytest.param([_occ()], [], ("--n_ctx", 128), False, id="no-request"),
        pytest.param([_occ()], [None], None, False, id="context-not-known"),
        pytest.param([_occ(window=64)], [None], ("--n_ctx", 128), False, id="window-below-launched"),
        pytest.param([_occ(tokens=100)], [None], ("--n_ctx", 128), False, id="tokens-within-window"),
        pytest.param([_occ(tokens=None)], [None], ("--n_ctx", 128), False, id="tokens-missing"),
        pytest.param([], [None], ("--n_ctx", 128), False, id="nothing-to-explain"),
    ],
)
def test_every_occurrence_must_pair_with_a_refused_request_of_its_own(
    found: list[Occurrence],
    refused: list[int | None],
    launched: tuple[str, int] | None,
    explained: bool,
) -> None:
    assert explained_by_refusals(found, refused, launched) is explained


def test_a_sized_request_is_paired_before_an_unsized_one_can_be_used_up() -> None:
    """Two lines of 300 and 471 tokens, requests sized 471 and unsized: 471 takes its own, 300 the other."""
    assert explained_by_refusals([_occ(tokens=300), _occ()], [471, None], ("--n_ctx", 128))
    assert not explained_by_refusals([_occ(tokens=300), _occ()], [471, 471], ("--n_ctx", 128))


# ---------------------------------------------------------------- the campaign passes the launched context
def test_campaign_passes_the_launched_context_to_both_harnesses() -> None:
    """``_gate_benchmark`` and ``_gate_semantic`` size a failed request against ``_context_length()``, as the
    probe gates do (read in the source: each call passes it)."""
    src = (REPO / "collectors" / "campaign.py").read_text(encoding="utf-8")
    for gate, call in (("_gate_benchmark", "run_benchmark("), ("_gate_semantic", "run_semantic(")):
        body = src.split(f"def {gate}(", 1)[1].split("\n    def ", 1)[0]
        args = body.split(call, 1)[1].split("\n        )", 1)[0]
        assert "context=self._context_length()" in args, gate


# ---------------------------------------------------------------- slow: the real llama-cpp-python
def _llamacpp() -> tuple[str, Path]:
    from .conftest import ensure_engine

    python = ensure_engine("llamacpp")["LLAMACPP_PYTHON"]
    model = Path(ensure_engine("trained")["TINY_TRAINED_GGUF"])
    if not model.is_file():
        pytest.skip("no tiny trained GGUF")
    return python, model


@pytest.mark.slow
def test_a_campaign_whose_benchmark_prompt_overflows_n_ctx_is_inconclusive_not_a_runtime_fault(
    home: Path, tmp_path: Path
) -> None:
    """``ledger collect run`` of the trained llamacpp campaign at ``--n_ctx 256`` whose benchmark corpus asks
    one prompt beyond it: the harness sizes the cut request against the launched context (the collector
    passes it), records it refused for the context, and the policy explains the engine's ASGI exception by
    that refusal — runtime-stability passes, the verdict is INCONCLUSIVE (harness-campaign-config)."""
    from ledger.collectors.corpus import corpus_digest
    from ledger.policy.loader import load_policy
    from ledger.policy.verdict import evaluate
    from ledger.service import Ledger

    from .conftest import entries_of, run_ledger

    python, model = _llamacpp()
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "llamacpp").symlink_to(Path(python).parents[1])
    shutil.copy(model, cache / "models" / "tiny-trained.gguf")
    rows = [
        json.loads(x) for x in (REPO / "campaigns" / "corpora" / "bench-tiny.jsonl").read_text().splitlines()
    ]
    rows[1]["messages"] = [{"role": "user", "content": "word " * 400}]
    corpus = tmp_path / "bench.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = (REPO / "campaigns" / "llamacpp-cpu-trained.toml").read_text(encoding="utf-8")
    text = re.sub(r'"--n_ctx",\s*"\d+"', '"--n_ctx", "256"', text)
    assert '"--n_ctx", "256"' in text
    text = re.sub(r"(?ms)^\[gates\.semantic\].*?(?=^\[)", "[gates.semantic]\nenabled = false\n\n", text)
    text = re.sub(r"(?m)^(\[gates\.benchmark\][^\[]*?)^corpus = .*$", rf'\1corpus = "{corpus}"', text)
    text = re.sub(
        r"(?m)^(\[gates\.benchmark\][^\[]*?)^digest = .*$", rf'\1digest = "{corpus_digest(corpus)}"', text
    )
    campaign = tmp_path / "campaign.toml"
    campaign.write_text(text, encoding="utf-8")
    r = run_ledger(
        "collect",
        "run",
        str(campaign),
        "--home",
        str(home),
        "--json",
        env={"LEDGER_ENGINE_CACHE": str(cache)},
    )
    lg = Ledger.open(home)
    try:
        bench = [e for e in entries_of(lg, "gate.result") if e["payload"]["gate"] == "benchmark"]
        verdict = evaluate(lg, {"campaign": "llamacpp-cpu-trained"}, load_policy("backend-qualification"))
    finally:
        lg.close()
    assert bench, r.stdout[-3000:] + r.stderr[-3000:]
    payload = bench[0]["payload"]
    assert payload["bounds"]["outcome"] == "config" and payload["counts"]["refused"] == 1, payload
    by_gate = {g["name"]: g["status"] for g in verdict["gates"]}
    assert by_gate["runtime-stability"] == "passed", verdict["gates"]
    assert verdict["verdict"] == "INCONCLUSIVE", verdict


# ---------------------------------------------------------------- the real engine's log (captured)
REAL_LOG = REPO / "tests" / "fixtures" / "engine_logs" / "llamacpp_streamed_context_overflow.log"


def test_the_captured_llama_cpp_python_overflow_is_one_explained_occurrence() -> None:
    """llama-cpp-python 0.3.36 at --n_ctx 128 (llama.cpp allocates 256), a streamed request of 471 prompt
    tokens: an exception group, the chain line, a plain traceback ending in the ValueError."""
    [occ] = _found(REAL_LOG.read_text(encoding="utf-8"))
    assert (occ.explanation, occ.tokens, occ.window) == (RULE, 471, 256)
    assert explained_by_refusals([occ], [None], ("--n_ctx", 128))
    assert not explained_by_refusals([occ], [None], ("--n_ctx", 512))  # the engine gave less than asked
