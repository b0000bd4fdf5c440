"""Fix 156 (audit 102 f4, issue 11): a SIGKILL sent from outside (`kill -9` of the engine mid-benchmark) was
NOT QUALIFIED — RUNTIME RELIABILITY, "an engine run crashed, hung or faulted the GPU", as `killed-sigkill`
(class resource, "OOM killer or operator"), though the kernel log was readable and held no OOM kill.

The collector now reads the kernel log when the engine's leader dies by SIGKILL on its own
(collectors/kernel.py sigkill_cause) and adds its line (collectors/launch.py KILLED) to the failure text; the
policy engine reads that line back from the launch's failure_detail, and the end from its record:

* no OOM-killer line in the launch's window: `killed-sigkill-from-outside` (operator-stop, one of
  params.outside_kill_signatures) — its end is that stop's, as an outside SIGTERM's: what the kill cut is
  excused by rule stopped-from-outside (INCONCLUSIVE); a timeout before it is still the engine's (no hold);
* the OOM killer killed the engine, or ran while it ran: `killed-by-oom-killer` (resource): NOT QUALIFIED,
  the reason saying it was killed by SIGKILL from the OOM killer;
* the kernel log could not be read: `killed-sigkill-unattributed` (params.unattributed_kill_signatures):
  runtime-stability INCONCLUSIVE, "cannot tell the OOM killer from an operator" — never credited, even where
  the kill cut nothing;
* no such line stored (an older launch, a claim alone): `killed-sigkill`, class resource, as before.

These need ledger/policy/acceptance.py to read params.outside_kill_signatures (see fix 156's other.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.launch import KILLED
from ledger.errors import PolicyError
from tests.policy.test_fail_closed import entry, gates, qualified_entries, rejected, verdict_of
from tests.policy.test_fix77_stopped_from_outside import (
    BENCHMARK_EXITED_AT,
    _cut_benchmark,
    _cut_structured,
    _stopped,
)
from tests.policy.test_fix116_held_benchmark_timeouts import _TIMED_OUT, _UNANSWERED, _benchmark

RULE = "stopped-from-outside"
RUNTIME = "NOT QUALIFIED — RUNTIME RELIABILITY"
PERFORMANCE = "NOT QUALIFIED — PERFORMANCE"
CANNOT_TELL = "cannot tell the OOM killer from an operator"
PID = 31202

OUTSIDE = KILLED["outside"].format(
    source="dmesg", text="no OOM-killer line from 2026-09-10T10:00:55Z to 2026-09-10T10:30:05Z", pid=PID
)
OOM_ENGINE = KILLED["oom-killer"].format(
    source="journalctl",
    text=f"the OOM killer killed process {PID} (python3): the host ran out of memory",
    pid=PID,
)
OOM_OTHER = KILLED["host-out-of-memory"].format(
    source="journalctl",
    text="the OOM killer killed process 4242 (postgres): the host ran out of memory",
    pid=PID,
)
UNREAD = KILLED["unread"].format(
    source="none",
    text="journalctl: exit 1: No journal files were found.; dmesg: exit 1: dmesg: read kernel buffer failed",
    pid=PID,
)


def _killed(
    es: list[dict[str, Any]],
    line: str | None,
    signature: str,
    *,
    signal: int | None = 9,
    exit_code: int | None = None,
    exited_at: str = BENCHMARK_EXITED_AT,
) -> None:
    """The launch ended by SIGKILL on its own (stop reason "exited", before any stop of the collector's),
    the collector's kernel-log line ``line`` stored as its failure_detail (None: none stored)."""
    _stopped(es, signal=9, signature=signature, exited_at=exited_at)
    p = entry(es, "launch")["payload"]
    p.update(signal=signal, exit_code=exit_code, failure_detail=line)
    if line is not None:
        p["details"]["sigkill_cause"] = line


def _runtime_reason(v: dict[str, Any]) -> str:
    return str(next(g["reason"] for g in v["gates"] if g["name"] == "runtime-stability"))


# --- the failure: a kill from outside was the engine's crash ------------------------------------------------


def test_benchmark_cut_by_an_outside_sigkill_is_inconclusive_not_a_runtime_failure(tmp_path: Path) -> None:
    es = qualified_entries()
    _killed(es, OUTSIDE, "killed-sigkill-from-outside")
    _cut_benchmark(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert gates(v)["benchmark"] == "missing", v["gates"]
    assert rejected(v)["benchmark"] == RULE
    assert "crashed" not in _runtime_reason(v)


def test_probe_cut_by_an_outside_sigkill_is_inconclusive(tmp_path: Path) -> None:
    es = qualified_entries()
    _killed(es, OUTSIDE, "killed-sigkill-from-outside", exited_at="2026-09-10T10:01:19.900000Z")
    _cut_structured(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "passed", v["gates"]
    assert rejected(v)["structured"] == RULE


def test_an_outside_sigkill_after_every_gate_ran_is_judged_as_an_outside_sigterm(tmp_path: Path) -> None:
    """Nothing cut: the stop's class, as killed-sigterm — the gates' own evidence decides (the neighbour)."""
    es = qualified_entries()
    _killed(es, OUTSIDE, "killed-sigkill-from-outside")
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    es = qualified_entries()
    _stopped(es, exited_at=BENCHMARK_EXITED_AT)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_an_outside_sigkill_excuses_no_timeout_before_it(tmp_path: Path) -> None:
    """No hold: two requests that timed out before the kill are the engine's (the reset is the kill's)."""
    es = qualified_entries()
    _killed(es, OUTSIDE, "killed-sigkill-from-outside")
    _benchmark(es, [_TIMED_OUT, _TIMED_OUT, _UNANSWERED], fault_kind="unanswered")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == PERFORMANCE, v["gates"]
    assert rejected(v)["benchmark"] == RULE
    assert gates(v)["benchmark"] == "failed", v["gates"]


# --- the OOM killer: the engine's resource failure ------------------------------------------------------


@pytest.mark.parametrize(
    "line", [OOM_ENGINE, OOM_OTHER], ids=["oom-kill-of-the-engine", "oom-line-for-another-pid"]
)
def test_a_sigkill_the_kernel_log_ties_to_the_oom_killer_is_not_qualified(tmp_path: Path, line: str) -> None:
    """The OOM killer killed the engine — or ran while it ran and named another pid (the engine's child, a
    pid of another namespace, another program): the host's memory failed under it either way."""
    es = qualified_entries()
    _killed(es, line, "killed-by-oom-killer")
    _cut_benchmark(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    reason = _runtime_reason(v)
    assert "killed-by-oom-killer (class resource)" in reason, reason
    assert "killed by SIGKILL" in reason and "OOM killer" in reason, reason
    assert rejected(v).get("benchmark") != RULE


def test_an_oom_line_beside_a_claimed_outside_kill_decides(tmp_path: Path) -> None:
    """The entry claims killed-sigkill-from-outside; what it stored names the OOM killer: resource."""
    es = qualified_entries()
    _killed(es, OOM_ENGINE, "killed-sigkill-from-outside")
    _cut_benchmark(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


# --- the kernel log unread: never credited ------------------------------------------------------------


@pytest.mark.parametrize("cut", [True, False], ids=["benchmark-cut", "nothing-cut"])
def test_a_sigkill_with_an_unreadable_kernel_log_is_inconclusive(tmp_path: Path, cut: bool) -> None:
    es = qualified_entries()
    _killed(es, UNREAD, "killed-sigkill-unattributed")
    if cut:
        _cut_benchmark(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "missing", v["gates"]
    assert CANNOT_TELL in _runtime_reason(v)


# --- derive, don't trust: the line and the end, read from the record --------------------------------------


def test_a_claimed_outside_kill_without_the_collectors_line_stays_resource(tmp_path: Path) -> None:
    es = qualified_entries()
    _killed(es, None, "killed-sigkill-from-outside")
    _cut_benchmark(es)
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RUNTIME, v["gates"]
    assert "killed-sigkill (resource)" in _runtime_reason(v)


@pytest.mark.parametrize(
    "line",
    [
        OUTSIDE.replace("from outside", "from outdoors"),
        OUTSIDE.replace("ledger-collector:", "ledger collector:"),
        "INFO: " + OUTSIDE,
    ],
    ids=["misspelled", "renamed-head", "not-at-the-line-start"],
)
def test_a_misspelled_kill_line_is_no_outside_kill(tmp_path: Path, line: str) -> None:
    es = qualified_entries()
    _killed(es, line, "killed-sigkill-from-outside")
    _cut_benchmark(es)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


@pytest.mark.parametrize(
    ("end", "verdict"),
    [
        ({"signal": 15}, "INCONCLUSIVE"),  # an outside SIGTERM: killed-sigterm decides, as before
        ({"signal": None, "exit_code": 1}, RUNTIME),  # the engine's own exit: the line names no such end
        ({"signal": 9, "lease_expired": True}, RUNTIME),  # a hang the lease cut: not this kill
    ],
    ids=["sigterm", "exit-1", "lease-expired"],
)
def test_the_kill_line_holds_only_with_the_sigkill_end_it_names(
    tmp_path: Path, end: dict[str, Any], verdict: str
) -> None:
    es = qualified_entries()
    _killed(es, OUTSIDE, "killed-sigkill-from-outside")
    entry(es, "launch")["payload"].update(end)
    _cut_benchmark(es)
    assert verdict_of(tmp_path, es)["verdict"] == verdict


def test_exit_137_from_outside_is_a_stop_in_its_class(tmp_path: Path) -> None:
    """Through a shell (exit 137): the class of an outside stop, as killed-143 — nothing cut, QUALIFIED."""
    es = qualified_entries()
    _killed(es, OUTSIDE, "killed-137-from-outside", signal=None, exit_code=137)
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"
    es = qualified_entries()
    _killed(es, None, "killed-137", signal=None, exit_code=137)
    assert verdict_of(tmp_path, es)["verdict"] == RUNTIME


# --- the params: missing or mistyped, none is excused ---------------------------------------------------


def _edit(policy_copy: Path, name: str, value: str | None) -> None:
    path = policy_copy / "backend-qualification.toml"
    text = path.read_text()
    line = re.compile(rf"^{name} = .*$", re.M)
    assert len(line.findall(text)) == 1
    path.write_text(line.sub("" if value is None else f"{name} = {value}", text))


@pytest.mark.parametrize(
    "value", [None, '"killed-sigkill-from-outside"', "[9]"], ids=["dropped", "a-string", "numbers"]
)
def test_outside_kill_signatures_missing_or_mistyped_excuse_nothing(
    tmp_path: Path, policy_copy: Path, value: str | None
) -> None:
    _edit(policy_copy, "outside_kill_signatures", value)
    es = qualified_entries()
    _killed(es, OUTSIDE, "killed-sigkill-from-outside")
    _cut_benchmark(es)
    assert verdict_of(tmp_path, es, policy_dir=policy_copy)["verdict"] == RUNTIME


@pytest.mark.parametrize(
    "value", ['"killed-sigkill-unattributed"', "[9, 137]", "{}"], ids=["a-string", "numbers", "a-table"]
)
def test_unattributed_kill_signatures_mistyped_never_credit(
    tmp_path: Path, policy_copy: Path, value: str
) -> None:
    _edit(policy_copy, "unattributed_kill_signatures", value)
    es = qualified_entries()
    _killed(es, UNREAD, "killed-sigkill-unattributed")
    v = verdict_of(tmp_path, es, policy_dir=policy_copy)
    assert v["verdict"] == "INCONCLUSIVE", v["gates"]
    assert gates(v)["runtime-stability"] == "missing", v["gates"]


def test_unattributed_kill_signatures_left_out_refuses_the_policy(tmp_path: Path, policy_copy: Path) -> None:
    _edit(policy_copy, "unattributed_kill_signatures", None)
    es = qualified_entries()
    _killed(es, UNREAD, "killed-sigkill-unattributed")
    with pytest.raises(PolicyError, match="unattributed_kill_signatures"):
        verdict_of(tmp_path, es, policy_dir=policy_copy)
