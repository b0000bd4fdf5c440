"""Issue 11: the kernel's OOM killer. An engine the OOM killer kills dies by SIGKILL with nothing in its own
log; the kernel log is the only record of why. The kernel collector records the OOM killer's lines as
events, the GPU-fault catalogue classes them ``host-memory`` (one vocabulary with ``GpuEventClass``), and
runtime stability fails on them — ``gpu_benign_classes`` lists only ``informational`` — naming the process
and pid killed. The class, the process and the pid are read again from the recorded line, never taken from
the entry's claims; an OOM kill outside the run does not count, one of another process during it does."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger.collectors.kernel import KernelRead, kernel_payload, parse_kernel_log
from ledger.entries import validate_payload
from ledger.gpu_faults import DEFAULT_CATALOGUE, GpuEventClass, classify_events, load_catalogue, read_oom
from tests.policy.test_fail_closed import LOG_WINDOWS, POLICY_DIR, entry, qualified_entries, verdict_of

RELIABILITY = "NOT QUALIFIED — RUNTIME RELIABILITY"
HOST = "gpu-box-1"
# what `journalctl -k -o short-iso-precise` prints for one global OOM kill of the engine (pid 12345)
ENGINE_OOM = [
    "2026-09-10T10:03:00.101000+0000 gpu-box-1 kernel: python3 invoked oom-killer: "
    "gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
    "2026-09-10T10:03:00.180000+0000 gpu-box-1 kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),"
    "cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/user.slice/user-1000.slice/session-3.scope,"
    "task=python3,pid=12345,uid=1000",
    "2026-09-10T10:03:00.181000+0000 gpu-box-1 kernel: Out of memory: Killed process 12345 (python3) "
    "total-vm:81234567kB, anon-rss:61234567kB, file-rss:1234kB, shmem-rss:0kB, UID:1000 pgtables:123456kB "
    "oom_score_adj:0",
    "2026-09-10T10:03:01.020000+0000 gpu-box-1 kernel: oom_reaper: reaped process 12345 (python3), now "
    "anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
]
# a memory cgroup's limit (the engine's systemd unit), not the host's memory
CGROUP_OOM = [
    "2026-09-10T10:03:00.180000+0000 gpu-box-1 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),"
    "cpuset=vllm.service,mems_allowed=0,oom_memcg=/system.slice/vllm.service,"
    "task_memcg=/system.slice/vllm.service,task=vllm,pid=12345,uid=0",
    "2026-09-10T10:03:00.181000+0000 gpu-box-1 kernel: Memory cgroup out of memory: Killed process 12345 "
    "(vllm) total-vm:1048576kB, anon-rss:900000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:2048kB "
    "oom_score_adj:0",
]


def _kernel_log(
    lines: list[str],
    *,
    at: str = "2026-09-10T10:55:00Z",
    own: bool = False,
    since: str | None = None,
) -> dict[str, Any]:
    """A kernel log as `ledger collect kernel` records it (parsed and classified by the collector): by the
    host's own health job (another campaign, the same host), or with ``own`` the campaign's (ref job)."""
    payload = kernel_payload(KernelRead("journalctl", True, "\n".join(lines) + "\n"))
    if since is not None:
        payload["since"] = since
    log: dict[str, Any] = {"name": "oom-kernel", "kind": "kernel.log", "key": "collector", "at": at}
    if own:
        log["refs"] = {"job": "campaign-job"}
    else:
        log["subject"] = {"campaign": f"{HOST}-health", "backend": "none", "host": HOST}
    log["payload"] = payload
    return log


def _with_log(log: dict[str, Any], engine_pid: int | None = 12345) -> list[dict[str, Any]]:
    es = qualified_entries()
    if engine_pid is not None:
        entry(es, "launch")["payload"]["details"] |= {"pid": engine_pid}  # (keeps details.base_url)
    es.append(log)
    return es


def _stability(v: dict[str, Any]) -> dict[str, Any]:
    return next(g for g in v["gates"] if g["name"] == "runtime-stability")


def _events(log: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = log["payload"]["events"]
    return events


# --- the failure: the engine killed by the OOM killer -------------------------------------------------------


def test_engine_killed_by_the_oom_killer_is_not_qualified(tmp_path: Path) -> None:
    """The engine (pid 12345, as its launch records) was killed by the global OOM killer while it ran; the
    host's health job recorded the kernel log. Runtime stability fails, and its reason names the kill:
    the process, the pid, that the host ran out of memory, and that the pid is the engine's."""
    log = _kernel_log(ENGINE_OOM)
    assert [e["kind"] for e in _events(log)] == [
        "oom-killer-invoked",
        "oom-kill-context",
        "oom-kill",
        "oom-reaped",
    ]
    assert {e["fault_class"] for e in _events(log)} == {"host-memory"}
    assert all(e["device"] is None for e in _events(log))  # the host's, of no one GPU
    validate_payload("kernel.log", 1, log["payload"])  # the strict model takes what the collector records
    v = verdict_of(tmp_path, _with_log(log))
    assert v["verdict"] == RELIABILITY, v["gates"]
    reason = _stability(v)["reason"]
    assert "the host out of memory (the kernel's OOM killer killed a process)" in reason
    assert "oom-kill (host-memory) at 2026-09-10T10:03:00.181000Z" in reason
    assert "the OOM killer killed process 12345 (python3): the host ran out of memory" in reason
    assert "the engine process this launch started (its details.pid)" in reason


def test_the_engine_killed_by_sigkill_with_the_oom_kill_in_its_own_kernel_log_names_both(
    tmp_path: Path,
) -> None:
    """The same kill as the engine's launch records it (ready, then SIGKILL, its signature left out) with the
    campaign's own kernel log: the end fails, and so does the log — judged over the run and whole."""
    log = _kernel_log(ENGINE_OOM, own=True, at="2026-09-10T10:48:00Z")
    es = _with_log(log)
    entry(es, "launch")["payload"].update(signal=9, exit_code=-9, ended_at="2026-09-10T10:03:02Z")
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RELIABILITY
    reason = _stability(v)["reason"]
    assert "ended in a way the collector's own stop does not account for" in reason
    assert "while the engine ran" in reason and "process 12345 (python3)" in reason
    assert "the campaign's kernel log records a GPU fault" in reason and "or the host out of memory" in reason
    assert "kernel log " in reason  # the whole-log check names its events too


# --- neighbours ---------------------------------------------------------------------------------------------


def test_a_memory_cgroup_oom_kill_is_not_qualified_and_names_the_cgroup(tmp_path: Path) -> None:
    log = _kernel_log(CGROUP_OOM)
    facts = classify_events(_events(log), load_catalogue())
    assert [(f["code"], f["process"], f["pid"], f["oom_scope"]) for f in facts] == [
        ("oom-kill-context", "vllm", 12345, "cgroup"),
        ("oom-kill", "vllm", 12345, "cgroup"),
    ]
    v = verdict_of(tmp_path, _with_log(log))
    assert v["verdict"] == RELIABILITY
    reason = _stability(v)["reason"]
    assert "process 12345 (vllm): memory cgroup /system.slice/vllm.service hit its limit" in reason
    assert "process 12345 (vllm): a memory cgroup hit its limit" in reason  # the Killed-process line's words


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(
            "oom-kill:task=python3,pid=12345,uid=1000,constraint=CONSTRAINT_NONE,nodemask=(null)",
            id="other-order",
        ),
        pytest.param(
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=0-1,3,cpuset=/,mems_allowed=0-3,5,global_oom,"
            "task_memcg=/user.slice,task=python3,pid=12345,uid=1000,future_field=7,another",
            id="extra-fields-and-list-values",
        ),
        pytest.param(
            "Out of memory (oom_kill_allocating_task): Killed process 12345 (python3) total-vm:1kB, "
            "anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:8kB oom_score_adj:0 new_field:1",
            id="killed-process-with-extra-fields",
        ),
        pytest.param(
            "Out of memory: Kill process 12345 (python3) score 912 or sacrifice child", id="older-kernel"
        ),
    ],
)
def test_an_oom_line_with_extra_fields_or_another_order_is_read(tmp_path: Path, line: str) -> None:
    (event,) = parse_kernel_log(f"2026-09-10T10:03:00.180000+0000 gpu-box-1 kernel: {line}\n")
    oom = read_oom(event["message"])
    assert oom is not None and (oom.process, oom.pid, oom.scope) == ("python3", 12345, "global")
    v = verdict_of(
        tmp_path, _with_log(_kernel_log([f"2026-09-10T10:03:00.180000+0000 gpu-box-1 kernel: {line}"]))
    )
    assert v["verdict"] == RELIABILITY
    assert "process 12345 (python3)" in _stability(v)["reason"]


def test_an_oom_kill_of_another_process_during_the_run_counts(tmp_path: Path) -> None:
    """Fail closed: the host was out of memory while the engine ran, whichever process the kernel chose —
    the engine ran on a host without the memory it needed. The reason names the process killed, and does
    not call it the engine's."""
    line = (
        "2026-09-10T10:20:00.000000+0000 gpu-box-1 kernel: Out of memory: Killed process 777 (postgres) "
        "total-vm:2048kB, anon-rss:1024kB, file-rss:0kB, shmem-rss:0kB, UID:110 pgtables:64kB oom_score_adj:0"
    )
    v = verdict_of(tmp_path, _with_log(_kernel_log([line])))
    assert v["verdict"] == RELIABILITY
    reason = _stability(v)["reason"]
    assert "the OOM killer killed process 777 (postgres)" in reason
    assert "the engine process this launch started" not in reason


@pytest.mark.parametrize(
    ("time", "at"),
    [
        pytest.param("2026-09-10T09:30:00.000000+0000", "2026-09-10T09:35:00Z", id="before-the-job-started"),
        pytest.param("2026-09-10T11:30:00.000000+0000", "2026-09-10T11:35:00Z", id="after-the-job-ended"),
    ],
)
def test_an_oom_kill_outside_the_run_does_not_count(tmp_path: Path, time: str, at: str) -> None:
    """The host's health job recorded an OOM kill before the campaign's job started (10:00) or after it
    ended (10:50): not while the engine ran, so the campaign stays QUALIFIED."""
    lines = [f"{time} {line.split(' ', 1)[1]}" for line in ENGINE_OOM]
    v = verdict_of(tmp_path, _with_log(_kernel_log(lines, at=at)))
    assert v["verdict"] == "QUALIFIED", v["gates"]


@pytest.mark.parametrize(("window", "counts"), LOG_WINDOWS)
def test_an_untimed_oom_kill_counts_where_its_logs_window_overlaps_the_run(
    tmp_path: Path, window: dict[str, str], counts: bool
) -> None:
    """A raw `dmesg` stamp without the boot time gives no time: the kill lies somewhere in its log's window
    (``since`` to when it was read) and counts wherever that window overlaps the run."""
    raw = "[ 5123.456789] Out of memory: Killed process 12345 (python3) total-vm:1kB, anon-rss:1kB"
    log = _kernel_log([raw], **window)
    assert _events(log)[0]["time"] is None
    v = verdict_of(tmp_path, _with_log(log))
    assert (v["verdict"] == RELIABILITY) is counts, v["gates"]
    if counts:
        assert "oom-kill (host-memory) at a time its log does not record" in _stability(v)["reason"]


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param({"fault_class": "informational"}, id="class-claims-informational"),
        pytest.param(
            {"kind": "gpu-reset-succeeded", "fault_class": "informational"}, id="kind-claims-a-reset"
        ),
        pytest.param({"kind": "oom-reaped"}, id="kind-claims-another-oom-line"),
    ],
)
def test_a_recorded_oom_kill_with_a_tampered_class_is_classified_from_its_line(
    tmp_path: Path, claim: dict[str, Any]
) -> None:
    """The policy engine reads the recorded line again: an OOM kill whose entry claims a harmless class or
    kind is still an OOM kill (``host-memory``), or ``unknown`` where the kind it records is not what its line
    says — never the class it claims; and what the line says of the process and pid is what it names."""
    log = _kernel_log(ENGINE_OOM[2:3], own=True, at="2026-09-10T10:48:00Z")
    _events(log)[0].update(claim)
    (fact,) = classify_events(_events(log), load_catalogue())
    assert fact["fault_class"] == ("host-memory" if "kind" not in claim else "unknown")
    assert (fact["process"], fact["pid"]) == ("python3", 12345)  # from the line, whatever the entry says
    v = verdict_of(tmp_path, _with_log(log))
    assert v["verdict"] == RELIABILITY, v["gates"]
    assert "process 12345 (python3)" in _stability(v)["reason"]


def test_a_recorded_oom_kill_cannot_be_narrowed_to_another_gpu(tmp_path: Path) -> None:
    """The launch was given GPU 0 only; an OOM kill recorded with GPU 2's address as its device is still
    the host's (its line says so): the device it records never narrows it away."""
    log = _kernel_log(ENGINE_OOM[2:3])
    _events(log)[0]["device"] = "PCI:0000:5e:00"
    es = _with_log(log)
    entry(es, "launch")["payload"]["env"] = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    gpus = entry(es, "host")["payload"]["gpus"]
    for i, gpu in enumerate(gpus):
        gpu["pci_bus_id"] = ["00000000:3B:00.0", "00000000:86:00.0", "00000000:5E:00.0"][i]
    v = verdict_of(tmp_path, es)
    assert v["verdict"] == RELIABILITY, v["gates"]
    assert "process 12345 (python3)" in _stability(v)["reason"]
    # the neighbour: a GPU event of that other GPU is narrowed away from this launch
    _events(log)[0].update(
        kind="nvrm-xid",
        xid=79,
        fault_class="gpu-fault",
        message="NVRM: Xid (PCI:0000:5e:00): 79, pid=999, name=other, GPU has fallen off the bus.",
    )
    assert verdict_of(tmp_path, es)["verdict"] == "QUALIFIED"


def test_a_policy_that_names_host_memory_benign_passes_the_oom_kill(tmp_path: Path) -> None:
    """The class is judged by ``params.gpu_benign_classes``, as every catalogue class is: only a policy that
    lists ``host-memory`` there lets an OOM kill pass (the shipped one lists only ``informational``)."""
    policies = tmp_path / "policies"
    shutil.copytree(POLICY_DIR, policies)
    path = policies / "backend-qualification.toml"
    text = path.read_text()
    assert 'gpu_benign_classes = ["informational"]\n' in text
    path.write_text(
        text.replace(
            'gpu_benign_classes = ["informational"]\n',
            'gpu_benign_classes = ["informational", "host-memory"]\n',
        )
    )
    es = _with_log(_kernel_log(ENGINE_OOM, own=True, at="2026-09-10T10:48:00Z"))
    assert verdict_of(tmp_path, es, policy_dir=policies)["verdict"] == "QUALIFIED"
    assert verdict_of(tmp_path, es)["verdict"] == RELIABILITY


# --- the collector and the vocabulary -----------------------------------------------------------------------


def test_oom_lines_are_recorded_even_when_they_name_a_gpu_process() -> None:
    """An OOM line is read before any GPU phrase: a killed process named like a GPU tool is an OOM kill;
    and a line about memory that is no OOM kill is not an event."""
    text = (
        "[  812.000001] Out of memory: Killed process 4242 (nvidia-smi) total-vm:1kB, anon-rss:1kB\n"
        "[  812.000002] Memory cgroup stats for /system.slice/vllm.service:\n"
        "[  812.000003] Free swap  = 0kB\n"
    )
    (event,) = parse_kernel_log(text)
    assert (event["kind"], event["device"]) == ("oom-kill", None)
    oom = read_oom(event["message"])
    assert oom is not None and (oom.process, oom.pid) == ("nvidia-smi", 4242)


def test_host_memory_is_one_class_of_the_catalogue_and_the_code() -> None:
    """The catalogue's [classes] and ``GpuEventClass`` are one vocabulary, host-memory included; every OOM
    kind has its row."""
    import tomllib

    classes = tomllib.loads(DEFAULT_CATALOGUE.read_text())["classes"]
    assert set(classes) == {c.value for c in GpuEventClass}
    assert GpuEventClass.HOST_MEMORY.value == "host-memory"
    cat = load_catalogue()
    for kind in ("oom-kill", "oom-kill-context", "oom-killer-invoked", "oom-reaped"):
        assert cat.events[kind].fault_class is GpuEventClass.HOST_MEMORY
