"""Secrets planted in an engine's environment, command line and output never reach the store or database.

The real path: `ledger collect launch` runs an engine that echoes its environment and arguments; the
collector redacts before it signs and stores. Every store object, the SQLite database (and its WAL), and
every decoded DSSE payload is searched for each secret, raw and base64-encoded at all three alignments.
"""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

LEDGER_BIN = Path(sys.executable).with_name("ledger")

ENGINE = r"""
import os, sys
for k in sorted(os.environ):
    print(f"{k}={os.environ[k]}")
print("argv:", sys.argv)
print("Authorization: Bearer " + os.environ[sys.argv[1]], file=sys.stderr)
"""


def _forms(secret: str) -> list[bytes]:
    """The secret's bytes and the base64 text that would carry it at each 3-byte alignment."""
    raw = secret.encode()
    out = [raw]
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + raw)
        # drop the characters that depend on the neighbouring bytes at both ends
        out.append(enc[4 if pad else 0 : -4])
    return out


@pytest.mark.parametrize(
    "bearer_var",
    [
        "API_BEARER_TOKEN",
        "UPSTREAM_BEARER",
    ],
)
def test_planted_secrets_appear_nowhere_in_store_or_database(tmp_path: Path, bearer_var: str) -> None:
    rnd = secrets.token_hex(12)
    planted = {
        "hf-token": "hf_" + rnd + "AbCdEfGhIjKlMn",
        "openai-key": "sk-proj-" + rnd + "QrStUvWxYz",
        "url-password": "pw-" + rnd,
        "bearer-env": "eyJ" + rnd + ".payload.sig",
        "bearer-cli": "tok-" + rnd + "-bearer",
        "api-key-flag": "key-" + rnd + "-flag",
    }
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "LEDGER_HOME": str(home)}

    def ledger(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(LEDGER_BIN), *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    assert ledger("init").returncode == 0
    assert ledger("keys", "new", "collector", "--role", "collector").returncode == 0
    r = ledger(
        "collect", "launch", "--engine", "generic", "--ready-url", "http://127.0.0.1:9", "--lease", "10",
        "--grace", "1", "--campaign", "secrets", "--json",
        "--env", f"HF_TOKEN={planted['hf-token']}",
        "--env", f"OPENAI_API_KEY={planted['openai-key']}",
        "--env", f"PIP_INDEX_URL=https://bob:{planted['url-password']}@pypi.example.com/simple",
        "--env", f"{bearer_var}={planted['bearer-env']}",
        "--env", f"EXTRA_HEADERS=Authorization: Bearer {planted['bearer-env']}",
        "--",
        sys.executable, "-c", ENGINE, bearer_var,
        "--api-key", planted["api-key-flag"],
        "--header", f"Authorization: Bearer {planted['bearer-cli']}",
        f"https://alice:{planted['url-password']}@example.com/v1",
        planted["hf-token"],
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr  # the engine never becomes ready: a recorded failure
    launch = json.loads(r.stdout)
    assert launch["env"]["HF_TOKEN"] == "[REDACTED]"

    # The entries were really recorded, with the engine's output as artifacts.
    conn = sqlite3.connect(home / "ledger.db")
    envelopes = [bytes(e) for (e,) in conn.execute("SELECT envelope FROM log_entries")]
    conn.close()
    statements = [base64.b64decode(json.loads(e)["payload"]) for e in envelopes]
    kinds = [json.loads(s)["kind"] for s in statements]
    assert "engine.launch" in kinds
    launch_st = json.loads(statements[kinds.index("engine.launch")])
    assert launch_st["artifacts"], "the engine's output should have been stored"

    files = [p for p in (home / "store").rglob("*") if p.is_file()]
    files += [p for p in home.glob("ledger.db*") if p.is_file()]
    assert len(files) >= 3
    leaks = []
    for what, secret in planted.items():
        forms = _forms(secret)
        for f in files:
            data = f.read_bytes()
            if any(form in data for form in forms):
                leaks.append(f"{what} in {f.relative_to(home)}")
        for st, kind in zip(statements, kinds, strict=True):
            if secret.encode() in st:
                leaks.append(f"{what} in a signed {kind} statement")
    assert not leaks, leaks
