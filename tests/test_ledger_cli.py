"""The foundation as a user runs it: init, keys, put, cat, record, show, log, verify, checkpoint, proofs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ledger.hashing import hash_file


def test_user_flow_end_to_end(cli, tmp_path: Path, home: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("init").code == 0
    assert cli("keys", "new", "hostA", "--role", "collector").code == 0
    assert cli("keys", "new", "reviewer1", "--role", "reviewer").code == 0

    stderr_log = tmp_path / "stderr.log"
    stderr_log.write_text("EngineCore failed: UVA is not available\n")
    result_json = tmp_path / "result.json"
    result_json.write_text('{"runs": []}')
    put = cli("put", stderr_log, result_json)
    assert put.code == 0
    lines = put.out.strip().splitlines()
    digest = f"blake3:{hash_file(stderr_log).blake3.hex}"
    assert lines[0] == f"{digest}  {stderr_log}"
    assert cli("put", "--json", stderr_log).json()["items"][0] == {
        "digest": digest,
        "size": stderr_log.stat().st_size,
        "path": str(stderr_log),
        "sha256": None,
        "created": False,
    }

    launch = tmp_path / "launch.json"
    launch.write_text(
        json.dumps(
            {
                "engine": "vllm",
                "command": ["vllm", "serve", "mistral-awq"],
                "started_at": "2026-09-01T10:00:00Z",
                "ready": False,
                "failure_signature": "uva-unavailable",
                "exit_code": 1,
            }
        )
    )
    rec = cli(
        "record",
        "engine.launch",
        "--subject",
        "campaign=vllm-mistral-awq",
        "--subject",
        "host=wsl2-5090",
        "--data",
        f"@{launch}",
        "--artifact",
        f"stderr={stderr_log}",
        "--key",
        "hostA",
        "--json",
    )
    assert rec.code == 0, rec.err
    entry = rec.json()
    receipt = entry.pop("receipt")  # the log's signed receipt, kept in the home for `ledger audit`
    assert (receipt["entry_id"], receipt["index"], receipt["logged_at"]) == (
        entry["id"],
        entry["seq"],
        entry["logged_at"],
    )
    assert receipt in [json.loads(x) for x in (home / "receipts.jsonl").read_text().splitlines()]
    for field in ("id", "seq", "kind", "subject", "payload", "artifacts", "refs", "signer", "collected_at"):
        assert field in entry
    assert entry["artifacts"][0]["digest"] == digest
    assert entry["signer_name"] == "hostA"

    sup = cli(
        "record",
        "supersession",
        "--subject",
        "campaign=vllm-mistral-awq",
        "--ref",
        f"supersedes={entry['id'][:12]}",
        "--data",
        '{"reason": "configure failure was wrong"}',
        "--key",
        "reviewer1",
        "--json",
    )
    assert sup.code == 0, sup.err
    assert sup.json()["refs"] == [{"rel": "supersedes", "id": entry["id"]}]

    shown = cli("show", entry["id"][:10], "--json").json()
    assert shown == {**entry}
    logged = cli("log", "--subject", "campaign=vllm-mistral-awq", "--kind", "engine.launch", "--json").json()
    assert [e["id"] for e in logged["items"]] == [entry["id"]]
    assert logged["next"] is None

    catted = subprocess.run(
        [sys.executable, "-m", "ledger.cli", "--home", str(home), "cat", digest],
        capture_output=True,
        check=True,
    )
    assert catted.stdout == stderr_log.read_bytes()

    ver = cli("verify", "--json")
    assert ver.code == 0
    assert ver.json()["ok"] is True
    assert ver.json()["size"] == 5

    cp = cli("checkpoint")
    assert cp.code == 0 and cp.out.splitlines()[1] == "5"
    proof = cli("proof", "inclusion", entry["id"])
    proof_file = tmp_path / "proof.json"
    proof_file.write_text(proof.out)
    pub = cli("keys", "export", "log").out.strip()
    ok = cli("proof", "verify", proof_file, "--public-key", pub, "--json")
    assert ok.code == 0 and ok.json()["ok"] is True

    cons = cli("proof", "consistency", "2", "5")
    cons_file = tmp_path / "cons.json"
    cons_file.write_text(cons.out)
    assert cli("proof", "verify", cons_file, "--public-key", pub).code == 0

    # A proof doctored by one hash byte is refused.
    doc = json.loads(proof.out)
    doc["hashes"][0] = ("0" if doc["hashes"][0][0] != "0" else "1") + doc["hashes"][0][1:]
    proof_file.write_text(json.dumps(doc))
    bad = cli("proof", "verify", proof_file, "--public-key", pub)
    assert bad.code == 2 and "proof-invalid" in bad.err


def test_commands_need_an_initialised_home(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("log")
    assert r.code == 2
    assert "home-not-initialised" in r.err


def test_init_twice_is_refused(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("init").code == 0
    r = cli("init")
    assert r.code == 2 and "already exists" in r.err


def test_by_reference_artifact_is_not_copied(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cli("init")
    cli("keys", "new", "hostA", "--role", "collector")
    shard = tmp_path / "model-00001-of-00004.safetensors"
    shard.write_bytes(b"\x00" * 4096)
    r = cli(
        "record",
        "note",
        "-s",
        "campaign=c",
        "--data",
        '{"text": "shard"}',
        "--by-reference",
        f"shard={shard}",
        "--key",
        "hostA",
        "--json",
    )
    assert r.code == 0, r.err
    art = r.json()["artifacts"][0]
    assert art["stored"] is False and art["path"] == str(shard) and art["size"] == 4096 and art["sha256"]
    assert cli("verify").code == 0


def test_usage_error_exits_2_without_traceback(cli) -> None:  # type: ignore[no-untyped-def]
    cli("init")
    r = cli("log", "--no-such-option")
    assert r.code == 2
    assert "Traceback" not in r.err


def test_one_map_from_outcomes_and_errors_to_exit_codes() -> None:
    import signal

    import pytest

    from ledger.cli import exit_code
    from ledger.cli._common import Cancelled, Outcome
    from ledger.errors import InputError, IntegrityError

    assert exit_code(None) == 0
    assert exit_code(Outcome.OK) == 0
    assert exit_code(Outcome.NO) == 1
    assert exit_code(InputError("bad")) == 2
    assert exit_code(IntegrityError("tampered")) == 2
    assert exit_code(OSError("disk")) == 2
    assert exit_code(Cancelled(signal.SIGTERM)) == 128 + signal.SIGTERM
    assert exit_code(KeyboardInterrupt()) == 128 + signal.SIGINT
    with pytest.raises(TypeError):  # an unknown outcome has no exit code: it is a bug, never a silent 0
        exit_code("not an outcome")
