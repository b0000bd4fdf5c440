"""The trained tiny GGUF: it trains deterministically on CPU and really answers its prompts.

Fast tests train it in torch (about 30 s of CPU) and check the answers by greedy decoding in torch; the
slow ones serve the GGUF with the real llama.cpp server (llama-cpp-python) and check its own answers at
temperature 0, with no grammar for the control.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped,unused-ignore]
import pytest

from ledger.collectors.campaign import structured_schema
from ledger.collectors.engines import tiny_trained as tt
from ledger.policy.conditions import compile_condition

from .conftest import ENGINES_SH, REPO, ensure_engine, free_port

pytest.importorskip("torch")

SEMANTIC = REPO / "campaigns" / "corpora" / "semantic-tiny.jsonl"
BENCH = REPO / "campaigns" / "corpora" / "bench-tiny.jsonl"
SEMANTIC_MAX_TOKENS = 64  # enough for every semantic answer and its </s>


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_answer(text: str, check: dict[str, Any]) -> bool:
    """The corpus check types, evaluated as plainly as possible (the harness owns the real scorer)."""
    answer = text.strip()
    kind = check["type"]
    if kind == "exact":
        return bool(answer == check["value"])
    if kind == "contains":
        return check["value"] in answer
    if kind == "regex":
        return re.search(check["pattern"], answer) is not None
    try:
        parsed = json.loads(answer)
    except ValueError:
        return False
    if kind == "json_schema":
        try:
            jsonschema.validate(parsed, check["schema"])
        except jsonschema.ValidationError:
            return False
        return True
    if kind == "cel":
        return compile_condition(check["expr"], "semantic-tiny.jsonl").holds({"answer": parsed})
    raise AssertionError(f"unknown check type {kind!r}")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tt.TrainResult]:
    out = tmp_path_factory.mktemp("trained") / "tiny-trained.gguf"
    res = tt.write_tiny_trained(out)
    return out, res


# ---------------------------------------------------------------- fast: prompts and tokens
def test_control_prompts_are_the_probe_defaults() -> None:
    from ledger.collectors import probe

    assert tt.CONTROL_PROMPT == probe.DEFAULT_PROMPT
    assert inspect.signature(probe.probe_completion).parameters["expect"].default == tt.CONTROL_ANSWER
    assert inspect.signature(probe.probe_structured).parameters["prompt"].default == tt.STRUCTURED_PROMPT
    jsonschema.validate(json.loads(tt.STRUCTURED_ANSWER), structured_schema())


def test_encode_is_llamacpp_spm_on_byte_tokens() -> None:
    # a space is SPM's U+2581 (three bytes); special token texts are their ids; no space prefix
    assert tt.encode("a b") == [3 + 0x61, 3 + 0xE2, 3 + 0x96, 3 + 0x81, 3 + 0x62]
    assert tt.encode("<s>x</s>") == [tt.BOS_ID, 3 + 0x78, tt.EOS_ID]
    assert tt.encode("é\n") == [3 + 0xC3, 3 + 0xA9, 3 + 0x0A]
    assert tt.answer_ids("a b") == [3 + 0x61, 3 + 0x20, 3 + 0x62, tt.EOS_ID]  # output spaces are 0x20
    assert tt.decode(tt.answer_ids('{"status": "READY"}')) == '{"status": "READY"}'


def test_prompt_is_the_rendered_gguf_template() -> None:
    msgs = [{"role": "user", "content": tt.CONTROL_PROMPT}]
    assert tt.render_prompt(msgs) == (
        "<s><|im_start|>user\nReply with exactly one word: READY<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tt.prompt_ids(msgs)
    assert ids[0] == tt.BOS_ID
    assert tt.BOS_ID not in ids[1:] and tt.EOS_ID not in ids


def test_corpora_formats() -> None:
    by_id = {it.id: it for it in tt.ITEMS}
    sem = _jsonl(SEMANTIC)
    assert 1 <= len(sem) <= 12
    assert [r["id"] for r in sem] == [it.id for it in tt.SEMANTIC_ITEMS]
    for row in sem:
        assert set(row) == {"id", "messages", "checks"}
        assert row["messages"] == by_id[row["id"]].message_dicts()
        assert row["checks"], row["id"]
        for c in row["checks"]:
            assert c["type"] in {"exact", "contains", "regex", "json_schema", "cel"}
        assert len(tt.answer_ids(by_id[row["id"]].answer)) <= SEMANTIC_MAX_TOKENS
    bench = _jsonl(BENCH)
    assert len({r["id"] for r in bench}) == len(bench)
    for row in bench:
        assert set(row) == {"id", "messages", "max_tokens"}
        assert row["messages"] == by_id[row["id"]].message_dicts()
        # every answer ends with </s> inside the budget: the output is the same on every request
        assert len(tt.answer_ids(by_id[row["id"]].answer)) <= row["max_tokens"]


def test_semantic_checks_pass_the_answer_and_reject_the_others() -> None:
    for row in _jsonl(SEMANTIC):
        own = next(it for it in tt.SEMANTIC_ITEMS if it.id == row["id"])
        assert all(check_answer(own.answer, c) for c in row["checks"]), row["id"]
        for other in tt.ITEMS:
            if other.answer != own.answer:
                assert not all(check_answer(other.answer, c) for c in row["checks"]), (row["id"], other.id)


# ---------------------------------------------------------------- fast: training
def test_training_converges_and_greedy_decoding_answers(trained: tuple[Path, tt.TrainResult]) -> None:
    _, res = trained
    assert res.converged, res
    assert res.loss < 0.01
    assert res.min_margin >= tt.MIN_MARGIN
    assert res.steps <= tt.MAX_STEPS
    assert res.answers == {it.id: it.answer for it in tt.ITEMS}


def test_gguf_layout(trained: tuple[Path, tt.TrainResult]) -> None:
    import gguf
    import numpy as np

    path, res = trained
    r = gguf.GGUFReader(str(path))

    def field(name: str) -> Any:
        f = r.get_field(name)
        assert f is not None, name
        return f.contents()

    assert field("general.architecture") == "llama"
    assert field("tokenizer.chat_template") == tt.CHAT_TEMPLATE
    assert field("tokenizer.ggml.add_space_prefix") is False
    assert field("llama.rope.dimension_count") == tt.HEAD_DIM
    assert len(field("tokenizer.ggml.tokens")) == tt.N_VOCAB
    tensors = {t.name: t for t in r.tensors}
    q = tensors["blk.0.attn_q.weight"]
    assert list(q.shape) == [tt.N_EMBD, tt.N_HEAD * tt.HEAD_DIM]  # GGUF ne order: (in, out)
    # stored as trained: no Q/K permutation (the torch model already rotates as llama.cpp NORM does)
    assert np.array_equal(
        np.asarray(q.data).reshape(res.state["blocks.0.q.weight"].shape), res.state["blocks.0.q.weight"]
    )
    assert np.array_equal(
        np.asarray(tensors["output.weight"].data).reshape(tt.N_VOCAB, tt.N_EMBD), res.state["out.weight"]
    )


def test_training_is_deterministic(trained: tuple[Path, tt.TrainResult], tmp_path: Path) -> None:
    path, first = trained
    again = tmp_path / "again.gguf"
    second = tt.write_tiny_trained(again)
    assert second.steps == first.steps
    assert hashlib.sha256(again.read_bytes()).hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()


def test_unconverged_training_refuses_to_write(tmp_path: Path) -> None:
    out = tmp_path / "short.gguf"
    with pytest.raises(RuntimeError, match="did not converge"):
        tt.write_tiny_trained(out, max_steps=5)
    assert not out.exists()


# ---------------------------------------------------------------- slow: the real llama.cpp server
@pytest.fixture(scope="module")
def llamacpp_python() -> str:
    return ensure_engine("llamacpp")["LLAMACPP_PYTHON"]


@pytest.fixture(scope="module")
def served(llamacpp_python: str, trained: tuple[Path, tt.TrainResult]) -> Iterator[str]:
    path, _ = trained
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            llamacpp_python,
            "-m",
            "llama_cpp.server",
            "--model",
            str(path),
            "--model_alias",
            "tiny-trained",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "512",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "llama.cpp server not ready in 120 s"
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _chat(url: str, messages: list[dict[str, str]], max_tokens: int, **extra: Any) -> dict[str, Any]:
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, **extra}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    choice: dict[str, Any] = r.json()["choices"][0]
    return choice


@pytest.mark.slow
def test_llamacpp_builds_the_same_prompt_tokens(
    llamacpp_python: str, trained: tuple[Path, tt.TrainResult]
) -> None:
    path, _ = trained
    script = (
        "import json, sys\n"
        "from llama_cpp import Llama\n"
        "from llama_cpp.llama_chat_format import Jinja2ChatFormatter\n"
        "m = Llama(model_path=sys.argv[1], n_ctx=512, verbose=False)\n"
        "text = m._model.token_get_text\n"
        "f = Jinja2ChatFormatter(template=m.metadata['tokenizer.chat_template'],\n"
        "                        eos_token=text(m.token_eos()), bos_token=text(m.token_bos()))\n"
        "out = []\n"
        "for msgs in json.loads(sys.stdin.read()):\n"
        "    res = f(messages=msgs)\n"
        "    toks = m.tokenize(res.prompt.encode(), add_bos=not res.added_special, special=True)\n"
        "    out.append({'format': m.chat_format, 'prompt': res.prompt, 'ids': list(toks)})\n"
        "print(json.dumps(out))\n"
    )
    items = [it.message_dicts() for it in tt.ITEMS]
    r = subprocess.run(
        [llamacpp_python, "-c", script, str(path)],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for msgs, g in zip(items, got, strict=True):
        assert g["format"] == "chat_template.default"  # the GGUF's own template, not a guessed one
        assert g["prompt"] == tt.render_prompt(msgs)
        assert g["ids"] == tt.prompt_ids(msgs)


_LOGITS_SCRIPT = (
    "import json, sys\n"
    "import numpy as np\n"
    "from llama_cpp import Llama\n"
    "m = Llama(model_path=sys.argv[1], n_ctx=512, logits_all=True, verbose=False)\n"
    "ids = json.loads(sys.argv[2])\n"
    "m.eval(ids)\n"
    "np.save(sys.argv[3], np.asarray(m.scores[: len(ids)], dtype=np.float32))\n"
)


def _hf_permute(w: Any) -> Any:
    """The Q/K row permutation convert_hf_to_gguf.py applies (HF rotates halves, llama.cpp pairs)."""
    return w.reshape(tt.N_HEAD, 2, w.shape[0] // tt.N_HEAD // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.slow
def test_llamacpp_logits_match_the_torch_model(
    llamacpp_python: str, trained: tuple[Path, tt.TrainResult], tmp_path: Path
) -> None:
    import numpy as np

    path, res = trained
    ids = tt.prompt_ids(tt.ITEMS[0].message_dicts()) + tt.answer_ids(tt.CONTROL_ANSWER)[:-1]
    out = tmp_path / "logits.npy"
    r = subprocess.run(
        [llamacpp_python, "-c", _LOGITS_SCRIPT, str(path), json.dumps(ids), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    engine = np.load(out)
    ours = tt.forward_logits(res.state, ids)
    assert engine.shape == ours.shape == (len(ids), tt.N_VOCAB)
    # same RoPE layout, norms and FFN: only rounding differs (llama.cpp keeps its KV cache in f16)
    assert float(np.abs(engine - ours).max()) < 0.05
    # and the check can fail: with Q/K permuted the HF way, the rotation pairs differ
    permuted = dict(res.state)
    for i in range(tt.N_BLOCKS):
        for n in ("q", "k"):
            permuted[f"blocks.{i}.{n}.weight"] = _hf_permute(res.state[f"blocks.{i}.{n}.weight"])
    assert float(np.abs(engine - tt.forward_logits(permuted, ids)).max()) > 1.0


@pytest.mark.slow
def test_llamacpp_answers_the_controls_by_inference(served: str) -> None:
    from ledger.collectors.probe import probe_completion, probe_sequential, probe_structured

    msgs = [{"role": "user", "content": tt.CONTROL_PROMPT}]
    choice = _chat(served, msgs, 8)
    assert choice["message"]["content"] == "READY"
    assert choice["finish_reason"] == "stop"  # ended by </s>, not by the token budget
    # the structured answer comes from the weights: identical with and without the grammar
    msgs = [{"role": "user", "content": tt.STRUCTURED_PROMPT}]
    assert _chat(served, msgs, 64)["message"]["content"] == tt.STRUCTURED_ANSWER
    assert probe_completion(served, model="tiny-trained")["ok"] is True
    structured = probe_structured(served, schema=structured_schema(), fmt="json_object", model="tiny-trained")
    assert structured["ok"] is True, structured
    assert structured["text"] == tt.STRUCTURED_ANSWER
    assert probe_sequential(served, count=3, model="tiny-trained")["ok"] is True


@pytest.mark.slow
def test_llamacpp_answers_every_semantic_item(served: str) -> None:
    failures = []
    for row in _jsonl(SEMANTIC):
        text = _chat(served, row["messages"], SEMANTIC_MAX_TOKENS)["message"]["content"]
        if not all(check_answer(text, c) for c in row["checks"]):
            failures.append((row["id"], text))
    assert failures == []


@pytest.mark.slow
def test_llamacpp_answers_the_bench_corpus_deterministically(served: str) -> None:
    by_id = {it.id: it for it in tt.ITEMS}
    for row in _jsonl(BENCH):
        texts = {_chat(served, row["messages"], row["max_tokens"])["message"]["content"] for _ in range(2)}
        assert texts == {by_id[row["id"]].answer}, row["id"]


@pytest.mark.slow
def test_engines_sh_trained_target_reuses_the_cached_model(tmp_path: Path) -> None:
    env = {**os.environ, "LEDGER_ENGINE_CACHE": str(tmp_path / "cache")}
    first = subprocess.run(
        ["bash", str(ENGINES_SH), "trained"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert first.returncode == 0, first.stderr
    out = dict(line.split("=", 1) for line in first.stdout.splitlines() if "=" in line)
    model = Path(out["TINY_TRAINED_GGUF"])
    assert model == tmp_path / "cache" / "models" / "tiny-trained.gguf"
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    again = subprocess.run(
        ["bash", str(ENGINES_SH), "trained"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert "cached" in again.stderr
    assert hashlib.sha256(model.read_bytes()).hexdigest() == digest


@pytest.mark.slow
def test_llamacpp_trained_campaign_passes_the_controls(
    llamacpp_python: str, trained: tuple[Path, tt.TrainResult], home: Path, tmp_path: Path
) -> None:
    from ledger.service import Ledger

    from .conftest import entries_of, run_ledger

    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "llamacpp").symlink_to(Path(llamacpp_python).parents[1])
    (cache / "models" / "tiny-trained.gguf").write_bytes(trained[0].read_bytes())
    r = run_ledger(
        "collect",
        "run",
        str(REPO / "campaigns" / "llamacpp-cpu-trained.toml"),
        "--home",
        str(home),
        "--json",
        env={"LEDGER_ENGINE_CACHE": str(cache)},
    )
    # every collector gate passes; the policy's verdict waits for the reviews the benchmark and semantic
    # results need (tests/collectors/test_real_engines.py records them and reaches QUALIFIED), so exit 1
    assert r.returncode == 1, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "succeeded"
    assert out["policy_verdict"] == "INCONCLUSIVE", out
    lg = Ledger.open(home)
    try:
        gates = {e["payload"]["gate"]: e["payload"]["status"] for e in entries_of(lg, "gate.result")}
        probes = {e["payload"]["check"]: e["payload"] for e in entries_of(lg, "health.probe")}
    finally:
        lg.close()
    for gate in ("api-readiness", "ready-control", "structured-output", "sequential-requests"):
        assert gates[gate] == "passed", gates
    assert probes["completion"]["text"] == "READY"
    assert probes["structured"]["text"] == tt.STRUCTURED_ANSWER
