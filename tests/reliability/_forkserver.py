"""A fork server for crash trials: imports the ledger once, then forks one real process per trial.

Each child runs the real CLI (``ledger.cli.main``) or the batch writer loop and is SIGKILLed by the test
at a random moment; forking skips the interpreter start-up so hundreds of trials fit in CI. The server
never hashes anything itself (BLAKE3's thread pool would not survive ``fork``).

Protocol, one JSON object per line on stdin/stdout:
  {"op": "cli", "argv": [...], "out": FILE}                     → {"pid": N}
  {"op": "writer", "home": DIR, "key": NAME, "tag": T, "out": FILE} → {"pid": N}
  {"op": "reap", "pid": N}                                      → {"pid": N, "signal": S|null, "code": C|null}
The child is reaped only when asked, so its pid cannot be reused while the test may still kill it.
"""

from __future__ import annotations

import io
import json
import os
import random
import sys
from typing import Any


def _redirect(out: str) -> None:
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    err = os.open(out + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 2)
    os.close(fd)
    os.close(err)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)


def _writer(home: str, key: str, tag: str) -> None:
    """Append batches of 1..12 entries forever; print each committed id (flushed) after its commit."""
    from pathlib import Path

    from ledger.service import Ledger

    led = Ledger.open(Path(home))
    signing = led.signing_key(key)
    rng = random.Random(tag)
    n = 0
    while True:
        k = rng.randint(1, 12)
        batch_tag = f"{tag}-{n}"
        envs = [
            led.sign(
                led.make_statement(
                    "note",
                    {"campaign": "crash", "batch": batch_tag},
                    {"text": f"{batch_tag} {i + 1}/{k}"},
                ),
                signing,
            )
            for i in range(k)
        ]
        for e in led.append(envs):
            sys.stdout.write(f"{batch_tag} {e.entry_id}\n")
        sys.stdout.flush()
        n += 1


def _child(req: dict[str, Any]) -> int:
    _redirect(req["out"])
    if req["op"] == "cli":
        from ledger.cli import main

        return main(req["argv"])
    _writer(req["home"], req["key"], req["tag"])
    return 0


def serve() -> None:
    import ledger.cli  # import once, before any fork
    import ledger.service  # noqa: F401

    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "reap":
            _, status = os.waitpid(req["pid"], 0)
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            reply: dict[str, Any] = {"pid": req["pid"], "signal": sig, "code": code}
        else:
            pid = os.fork()
            if pid == 0:
                try:
                    code = _child(req)
                except BaseException as e:  # the trial's own failure, reported by exit code
                    sys.stderr.write(f"child failed: {e!r}\n")
                    code = 99
                sys.stdout.flush()
                os._exit(code)
            reply = {"pid": pid}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
