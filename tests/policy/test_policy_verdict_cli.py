"""`ledger verdict`, `verdict replay`, `check routing-change` and `policy` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger.canonical import canonical_bytes
from ledger.policy import evaluate, load_policy

CAMPAIGN = "campaign=vllm-mistral-awq"


def test_verdict_json_is_byte_identical_for_the_same_checkpoint_and_policy(build, cli) -> None:
    b = build("backend-qualification/seed000-runtime-reliability.toml")
    first = cli("verdict", "--home", str(b.home), "--subject", CAMPAIGN, "--json")
    second = cli("verdict", "--home", str(b.home), "--subject", CAMPAIGN, "--json")
    assert first.code == 0, first.err
    assert first.out == second.out
    result = json.loads(first.out)
    assert first.out.encode() == canonical_bytes(result) + b"\n"
    assert result["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    assert result["status"] == "not_qualified"
    assert {"verdict", "status", "gates", "used", "rejected", "policy", "checkpoint"} <= set(result)
    assert result["policy"]["name"] == "backend-qualification"
    assert result["policy"]["digest"].startswith("blake3:")
    assert result["checkpoint"]["size"] == b.ledger.size()
    assert len(result["checkpoint"]["root"]) == 64
    gate = next(g for g in result["gates"] if g["name"] == "api-readiness")
    assert set(gate) >= {"name", "status", "evidence", "reason"}
    rejected = {r["entry"]: r for r in result["rejected"]}
    assert rejected[b.names["launch-4-beyond-budget"]]["rule"] == "beyond-attempt-budget"


def test_human_table_names_gates_and_rejections(build, cli) -> None:
    b = build("backend-qualification/seed000-runtime-reliability.toml")
    r = cli("verdict", "--home", str(b.home), "--subject", CAMPAIGN)
    assert r.code == 0
    assert "NOT QUALIFIED — RUNTIME RELIABILITY" in r.out
    assert "not_authorized" in r.out
    assert "beyond-attempt-budget" in r.out


def test_at_evaluates_the_log_as_it_stood(build, cli) -> None:
    b = build("backend-qualification/seed003-review.toml")
    fail_seq = b.ledger.get(b.names["review-fail-919"]).seq
    then = json.loads(
        cli(
            "verdict",
            "--home",
            str(b.home),
            "--subject",
            "campaign=strix-native-control",
            "--at",
            str(fail_seq + 1),
            "--json",
        ).out
    )
    now = json.loads(
        cli("verdict", "--home", str(b.home), "--subject", "campaign=strix-native-control", "--json").out
    )
    gates_then = {g["name"]: g["status"] for g in then["gates"]}
    gates_now = {g["name"]: g["status"] for g in now["gates"]}
    assert then["checkpoint"]["size"] == fail_seq + 1
    assert gates_then["semantic"] == "missing"
    assert gates_now["semantic"] == "passed"
    assert then["checkpoint"]["root"] != now["checkpoint"]["root"]


def test_record_then_replay_is_same_and_a_changed_policy_differs(build, cli, policy_copy: Path) -> None:
    b = build("backend-qualification/seed000-runtime-reliability.toml")
    size = b.ledger.size()
    # judged at the log time of the last entry (a recorded verdict is judged at the clock unless --now says)
    head = b.ledger.get_seq(size - 1).logged_at
    r = cli("verdict", "--home", str(b.home), "--subject", CAMPAIGN, "--now", head, "--record", "--json")
    assert r.code == 0, r.err
    assert b.ledger.size() == size + 1
    entry = b.ledger.get_seq(size)
    assert entry.kind == "verdict"
    assert entry.statement.payload["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    # the full result is the entry's stored artifact, addressed by the digest the payload holds
    assert "result" not in entry.statement.payload
    assert b.ledger.verdict_result(entry) == json.loads(r.out)
    (art,) = entry.statement.artifacts
    assert art.name == "verdict-result.json"
    assert art.digest == entry.statement.payload["result_digest"]
    assert entry.statement.payload["subject"] == {"campaign": "vllm-mistral-awq"}
    assert entry.statement.payload["counts"]["used"] == len(json.loads(r.out)["used"])
    assert entry.statement.subject["host"] == "wsl-rtx5090"  # identity travels with the recorded verdict

    same = cli("verdict", "replay", entry.entry_id, "--home", str(b.home))
    assert same.code == 0, same.out + same.err
    assert "same" in same.out

    qual = policy_copy / "backend-qualification.toml"
    qual.write_text(qual.read_text().replace("attempt_budget = 3", "attempt_budget = 4"))
    changed = cli(
        "verdict", "replay", entry.entry_id, "--home", str(b.home), "--policy-dir", str(policy_copy), "--json"
    )
    assert changed.code == 1
    report = json.loads(changed.out)
    assert not report["same"]
    assert any(d.startswith("policy digest changed") for d in report["differences"])
    assert (
        report["current"]["verdict"] == "QUALIFIED"
        or report["current"]["verdict"] != report["recorded"]["verdict"]
    )


def test_record_with_a_collector_key_is_refused_and_nothing_is_recorded(build, cli) -> None:
    b = build("backend-qualification/seed000-runtime-reliability.toml")
    size = b.ledger.size()
    r = cli("verdict", "--home", str(b.home), "--subject", CAMPAIGN, "--record", "--key", "collector")
    assert r.code == 2
    assert "wrong-role" in r.err
    assert b.ledger.size() == size


def test_unknown_subject_is_an_error_and_records_nothing(build, cli) -> None:
    b = build("backend-qualification/seed000-runtime-reliability.toml")
    size = b.ledger.size()
    r = cli("verdict", "--home", str(b.home), "--subject", "campaign=nope", "--record")
    assert r.code == 2
    assert "no entries for subject campaign=nope" in r.err
    assert b.ledger.size() == size


def test_unknown_policy_is_an_error(build, cli) -> None:
    b = build("backend-qualification/seed000-runtime-reliability.toml")
    r = cli("verdict", "--home", str(b.home), "--subject", CAMPAIGN, "--policy", "no-such-policy")
    assert r.code == 2
    assert "unknown policy 'no-such-policy'" in r.err


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda t: t.replace('name = "api-readiness"', 'name = "api-readiness"\nselct = "x"'),
            "unknown field",
        ),
        (lambda t: t.replace("attempt_budget = 3 ", "attempt_budget = = 3 "), "TOML syntax error"),
        (
            lambda t: t.replace(
                "e.kind == 'engine.launch' && e.payload.ready)",
                "e.kind == 'engine.launch' && && e.payload.ready)",
                1,
            ),
            "CEL syntax error",
        ),
    ],
    ids=["unknown-field", "toml-syntax", "cel-syntax"],
)
def test_policy_errors_name_file_and_line_and_record_nothing(
    build, cli, policy_copy: Path, edit, expected
) -> None:
    b = build("backend-qualification/seed000-runtime-reliability.toml")
    qual = policy_copy / "backend-qualification.toml"
    text = edit(qual.read_text())
    qual.write_text(text)
    size = b.ledger.size()
    r = cli(
        "verdict", "--home", str(b.home), "--subject", CAMPAIGN, "--policy-dir", str(policy_copy), "--record"
    )
    assert r.code == 2
    assert expected in r.err
    assert f"{qual}:" in r.err
    line = int(r.err.split(f"{qual}:")[1].split(":")[0])
    marker = {"unknown field": "selct", "TOML syntax error": "= =", "CEL syntax error": "&& &&"}[expected]
    assert marker in text.splitlines()[line - 1]
    assert b.ledger.size() == size


def test_routing_change_exit_codes(build, cli, tmp_path: Path) -> None:
    b = build("routing-change/seed004-router.toml")
    subject = [
        "--subject",
        "backend=vllm",
        "--subject",
        "model=Qwen3-Embedding-8B",
        "--subject",
        "host=gpu-box-1",
    ]
    embed = {"engine": "vllm", "name": "vllm-embed", "model": "Qwen3-Embedding-8B", "gpus": [2]}
    ocr = {
        "engine": "vllm",
        "name": "vllm-ocr",
        "model": "OvisOCR2",
        "gpus": [2],
        "gpu_memory_utilization": 0.10,
    }
    ok = tmp_path / "ok.toml"
    ok.write_text(
        'host = "gpu-box-1"\n[[services]]\nname = "vllm-embed"\nengine = "vllm"\n'
        'model = "Qwen3-Embedding-8B"\ngpus = [2]\n'
        'gpu_memory_utilization = 0.25\n[[services]]\nname = "vllm-ocr"\nengine = "vllm"\ngpus = [2]\n'
        "gpu_memory_utilization = 0.10\n"
    )
    over = tmp_path / "over.json"
    over.write_text(
        json.dumps({"host": "gpu-box-1", "services": [{**embed, "gpu_memory_utilization": 0.80}, ocr]})
    )
    home = ["--home", str(b.home), "--now", "2026-09-11T09:00:00Z"]
    allowed = cli("check", "routing-change", *home, *subject, "--deployment", str(ok))
    assert allowed.code == 0, allowed.out
    refused = cli("check", "routing-change", *home, *subject, "--deployment", str(over), "--json")
    assert refused.code == 1
    report = json.loads(refused.out)
    assert report["allowed"] is False
    assert any("GPU2 gpu_memory_utilization sum 0.9 > 0.88" in r for r in report["reasons"])
    error = cli("check", "routing-change", *home, "--subject", "model=Qwen3-Embedding-8B")
    assert error.code == 2
    assert "host" in error.err
    # a field verdicts are not matched on would be ignored: the check would rely on another campaign's verdict
    other = cli("check", "routing-change", *home, *subject, "--subject", "campaign=another", "--json")
    assert other.code == 2
    assert "campaign is not one of them" in other.err
    # the layout after the change must run the model the change routes to
    unserved = tmp_path / "unserved.json"
    unserved.write_text(json.dumps({"host": "gpu-box-1", "services": [ocr]}))
    refused = cli("check", "routing-change", *home, *subject, "--deployment", str(unserved), "--json")
    assert refused.code == 1
    assert json.loads(refused.out)["reasons"] == [
        "the deployment runs no service of Qwen3-Embedding-8B on gpu-box-1: the change would route traffic"
        " to a model the layout does not serve"
    ]


def test_policy_test_and_list(cli, policy_copy: Path) -> None:
    r = cli("policy", "list", "--json")
    assert r.code == 0
    assert {p["name"] for p in json.loads(r.out)["items"]} >= {
        "backend-qualification",
        "evidence-acceptance",
        "routing-change",
    }
    shown = cli("policy", "show", "routing-change", "--json")
    assert json.loads(shown.out)["spec"]["params"]["gpu_util_sum_max"] == 0.88
    assert cli("policy", "test", "routing-change").code == 0


def test_policy_test_fails_when_an_expectation_is_wrong(cli, policy_copy: Path) -> None:
    fixtures = policy_copy / "fixtures" / "backend-qualification"
    fixtures.mkdir(parents=True)
    src = (
        Path(__file__).resolve().parents[2]
        / "policies"
        / "fixtures"
        / "backend-qualification"
        / "seed004-sleeping.toml"
    )
    (fixtures / "wrong.toml").write_text(
        src.read_text().replace(
            'expect.verdict = "NOT QUALIFIED — RUNTIME RELIABILITY"', 'expect.verdict = "QUALIFIED"'
        )
    )
    r = cli("policy", "test", "--policy-dir", str(policy_copy), "--json")
    assert r.code == 1
    failures = json.loads(r.out)["items"][0]["failures"]
    assert any("expected 'QUALIFIED'" in f for f in failures)


def test_tampered_envelope_is_refused_or_rejected_as_bad_signature(build) -> None:
    """Someone with write access to the database drops the append-only trigger and edits an envelope to
    hide the sleeping engine. Edited in place, the envelope no longer hashes to the entry id its leaf
    commits: the log is refused (integrity). Rewritten with its id, record and leaf (the thorough forger),
    the row agrees with its leaf and only its signature is wrong: the entry is rejected, bad-signature."""
    import base64

    from ledger.errors import IntegrityError
    from tests.policy.test_verdict_caches import _tamper

    b = build("backend-qualification/seed004-sleeping.toml")
    policy = load_policy("backend-qualification")
    target = b.ledger.get(b.names["health-while-sleeping"])
    env = json.loads(target.envelope)
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["payload"]["sleeping"] = False  # hide the sleeping engine
    env["payload"] = base64.b64encode(canonical_bytes(statement)).decode()
    _tamper(b.home, target.seq, env, thorough=False)
    with pytest.raises(IntegrityError, match="envelope hashes to"):
        evaluate(b.ledger, {"campaign": "router-ocr"}, policy)
    edited = _tamper(b.home, target.seq, env)
    result = evaluate(b.ledger, {"campaign": "router-ocr"}, policy)
    rejected = {r["entry"]: r for r in result["rejected"]}
    assert rejected[edited]["rule"] == "bad-signature"
    assert edited not in result["used"]


def _bench_verdict_module():  # type: ignore[no-untyped-def]
    """bench/bench_verdict.py (not a package): how the bench makes a big, signed campaign."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "bench_verdict.py"
    spec = importlib.util.spec_from_file_location("bench_verdict", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_recording_a_verdict_over_a_10k_entry_campaign_fits_the_envelope_limit(
    tmp_path: Path, cli, clock_at
) -> None:
    from ledger.service import MAX_ENVELOPE_BYTES, Ledger

    bench = _bench_verdict_module()
    home = tmp_path / "home"
    bench.build(home, 10_000, 10_000)  # signed entries appended in batches of 1000, as the bench does
    subject = f"campaign={bench.CAMPAIGN}"
    ledger = Ledger.open(home)
    size = ledger.size()
    head = ledger.get_seq(size - 1).logged_at  # judged as of the campaign's last entry, not the clock
    with clock_at(head):  # recorded with the clock at that time (the campaign's evidence holds then)
        r = cli("verdict", "--home", str(home), "--subject", subject, "--now", head, "--record", "--json")
    assert r.code == 0, r.err
    result = json.loads(r.out)
    assert len(result["used"]) > 9_000
    # the full result would not fit in an entry; recorded, it is an artifact the entry names by digest
    assert len(canonical_bytes(result)) > MAX_ENVELOPE_BYTES
    entry = ledger.get_seq(size)
    assert entry.kind == "verdict"
    assert len(entry.envelope) < 64 * 1024
    payload = entry.statement.payload
    assert payload["verdict"] == result["verdict"]
    assert payload["counts"]["used"] == len(result["used"])
    assert payload["counts"]["rejected"] == len(result["rejected"])
    assert ledger.verdict_result(entry) == result
    replay = cli("verdict", "replay", entry.entry_id, "--home", str(home), "--json")
    assert replay.code == 0, replay.out + replay.err
    assert json.loads(replay.out)["same"] is True


def test_a_verdict_recorded_with_its_result_inline_still_replays(build, cli) -> None:
    """Entries recorded before the result moved to an artifact hold it in the payload: they still replay."""
    from ledger.policy.verdict import result_digest

    b = build("backend-qualification/seed000-runtime-reliability.toml")
    result = evaluate(b.ledger, {"campaign": "vllm-mistral-awq"}, load_policy("backend-qualification"))
    payload = {
        "verdict": result["verdict"],
        "status": result["status"],
        "policy": result["policy"],
        "checkpoint": result["checkpoint"],
        "used": result["used"],
        "rejected": [
            {"entry": x["entry"], "rule": x["rule"], "detail": x["detail"], "kind": x["kind"]}
            for x in result["rejected"]
        ],
        "result_digest": result_digest(result),
        "result": result,
    }
    st = b.ledger.make_statement("verdict", {**result["subject"], **result["identity"]}, payload)
    entry = b.ledger.append([b.ledger.sign(st, b.ledger.cfg.admin_key)])[0]
    assert b.ledger.verdict_result(entry) == result
    r = cli("verdict", "replay", entry.entry_id, "--home", str(b.home), "--json")
    assert r.code == 0, r.out + r.err
    assert json.loads(r.out)["same"] is True


def test_a_verdict_whose_result_artifact_is_gone_does_not_replay(build, cli) -> None:
    b = build("backend-qualification/seed000-runtime-reliability.toml")
    r = cli("verdict", "--home", str(b.home), "--subject", CAMPAIGN, "--record", "--json")
    assert r.code == 0, r.err
    entry = b.ledger.query(kind="verdict", descending=True, limit=1)[0]
    digest = entry.statement.payload["result_digest"]
    from ledger.hashing import parse_digest

    path = b.ledger.store._path(parse_digest(digest))  # type: ignore[attr-defined]
    path.chmod(0o644)
    path.unlink()
    replay = cli("verdict", "replay", entry.entry_id, "--home", str(b.home), "--json")
    assert replay.code == 2, replay.out + replay.err
    assert "artifact" in (replay.out + replay.err)
