"""The log's side of witnessing: submit each published checkpoint to the configured witnesses and keep
the cosignatures they return. A witness that is down or refuses never fails the log: it is a warning, and
the checkpoint is served without that cosignature (``Ledger.witness_status`` names it)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from ledger.entries import format_time, now_utc
from ledger.errors import ConfigError, LedgerError
from ledger.home import WitnessConfig
from ledger.log import Checkpoint
from ledger.repo import LogRepo
from ledger.witness import parse_witness_vkey, request_cosignature

__all__ = ["WITNESS_TIMEOUT_ENV", "submit_to_witnesses", "witness_timeout_s"]

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
