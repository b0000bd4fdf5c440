"""The log's side of witnessing: submit each published checkpoint to the configured witnesses and keep
the cosignatures they return. A witness that is down or refuses never fails the log: it is a warning, and
the checkpoint is served without that cosignature (``Ledger.witness_status`` names it)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

from ledger.entries import format_time, now_utc
from ledger.errors import ConfigError, LedgerError
from ledger.home import WitnessConfig
from ledger.log import Checkpoint
from ledger.repo import LogRepo
from ledger.witness import parse_witness_vkey, request_cosignature

__all__ = ["WITNESS_TIMEOUT_ENV", "WitnessSubmitter", "submit_to_witnesses", "witness_timeout_s"]

log = logging.getLogger("ledger.witness")

WITNESS_TIMEOUT_ENV = "LEDGER_WITNESS_TIMEOUT"


def witness_timeout_s() -> float:
    """Seconds one add-checkpoint request may take (``LEDGER_WITNESS_TIMEOUT``, default 5)."""
    text = os.environ.get(WITNESS_TIMEOUT_ENV, "5")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{WITNESS_TIMEOUT_ENV}={text!r}: seconds, a number > 0")
    return value


def submit_to_witnesses(
    repo: LogRepo,
    witnesses: Sequence[WitnessConfig],
    cp: Checkpoint,
    proof_for: Callable[[int], Sequence[bytes]],
) -> dict[str, str]:
    """Ask each witness to cosign ``cp``; keep each verified cosignature. Witness key name -> problem for
    each that did not cosign (also logged as a warning)."""
    problems: dict[str, str] = {}
    timeout = witness_timeout_s()
    for w in witnesses:
        try:
            name, _ = parse_witness_vkey(w.vkey)
        except LedgerError as e:
            problems[w.url] = e.message
            log.warning("witness %s: %s", w.url, e.message)
            continue
        try:
            with repo.read() as conn:
                last = repo.witness_size(conn, name)
            line = request_cosignature(w.url, w.vkey, cp, last, proof_for, timeout=timeout)
            with repo.append_transaction() as conn:
                repo.insert_cosignature(conn, cp.size, name, cp.root.hex(), line, format_time(now_utc()))
        except LedgerError as e:
            problems[name] = e.message
            log.warning("checkpoint %d has no cosignature by witness %s: %s", cp.size, name, e.message)
    return problems


class WitnessSubmitter:
    """Submits published checkpoints to the witnesses off the append path, one at a time, in order.

    An append that publishes returns at once: a slow or hung witness (each request is bounded by
    ``LEDGER_WITNESS_TIMEOUT``) never holds up the caller. A checkpoint not yet sent is replaced by a newer
    one (a witness needs only the latest: the consistency proof is from the size it last cosigned), so a
    witness that is down builds no backlog. The thread is not a daemon, so a short-lived process (a CLI
    append) still delivers before it exits; ``wait`` joins it (``Ledger.close``, ``ledger checkpoint``).
    """

    def __init__(self, run: Callable[[Checkpoint], object]) -> None:
        self._run = run
        self._lock = threading.Lock()
        self._next: Checkpoint | None = None
        self._thread: threading.Thread | None = None

    def submit(self, cp: Checkpoint) -> None:
        with self._lock:
            if self._next is None or cp.size >= self._next.size:
                self._next = cp
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="ledger-witness", daemon=False)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._lock:
                cp, self._next = self._next, None
                if cp is None:
                    self._thread = None
                    return
            try:
                self._run(cp)
            except Exception:  # never let one checkpoint's failure stop later ones
                log.exception("submitting checkpoint %d to the witnesses failed", cp.size)

    def wait(self, timeout: float | None = None) -> None:
        """Return once every checkpoint submitted so far was sent (or ``timeout`` seconds passed)."""
        with self._lock:
            t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
