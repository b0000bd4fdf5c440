"""``ledger collect``: the command-line adapter over the collectors (host, kernel, model, launch, probe,
benchmark, semantic, run).

Every command signs with ``--key`` (default ``collector``). When the home has no key named ``collector``,
the command creates one and enrols it with the role ``collector``, signed by the home's admin key; any
other key name must already exist. ``--server``/``--token`` send the entries to a ledger server instead
(spooled in the home while it is unreachable).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from ledger.cli._common import (
    STATE,
    Cancelled,
    HomeOption,
    JsonOption,
    Outcome,
    SubjectOption,
    err,
    get_ledger,
    home_path,
    init_ledger,
    out,
    parse_subject,
    print_items,
    print_json,
    print_table,
    progress,
    warn,
)
from ledger.errors import InputError, KeyNotFoundError, LedgerError

if TYPE_CHECKING:
    from ledger.collectors.campaign import CampaignResult
    from ledger.recorder import Recorder

__all__ = ["campaign_app", "collect_app", "push"]

collect_app = typer.Typer(
    help="Collect evidence on this host: facts, kernel GPU events, model pins, "
    "engine launches, probes and whole qualification campaigns.",
    no_args_is_help=True,
)
campaign_app = typer.Typer(help="Campaign files: write one from a shipped template.", no_args_is_help=True)

KeyOption = Annotated[
    str,
    typer.Option(
        "--key",
        help="Signing key in the home (default: collector; "
        "created and enrolled with role collector if absent).",
    ),
]
CampaignOption = Annotated[
    str | None, typer.Option("--campaign", "-c", help="Campaign id for the subject (default: adhoc).")
]
ServerOption = Annotated[
    str | None, typer.Option("--server", envvar="LEDGER_SERVER", help="Send entries to this ledger server.")
]
TokenOption = Annotated[
    str | None, typer.Option("--token", envvar="LEDGER_TOKEN", help="Bearer token for --server.")
]


def _recorder(home: Path | None, key: str, server: str | None, token: str | None) -> Recorder:
    from ledger.collectors.remote import make_recorder

    ledger = get_ledger(home)
    if not ledger.has_private_key(key):
        if key != "collector":
            raise KeyNotFoundError(f"no private key named {key!r} in {ledger.home_path}")
        if ledger.keyring().by_name(key) is not None:
            raise KeyNotFoundError(
                f"a key named {key!r} is enrolled but its private key is not in this home",
                hint="pass --key NAME with a key of this home",
            )
        ledger.new_key(key, ["collector"])
        err.print(f"created and enrolled key {key!r} (role collector) in {ledger.home_path}")
    rec = make_recorder(ledger, key, server=server, token=token)
    if server:
        STATE.after.append(lambda: _spool_notice(rec, server))
    return rec


def _recorded(rec: Recorder) -> str:
    """The word for what happened to the entries: ``recorded``, or ``spooled`` when the server was away."""
    return "spooled (not yet on the server)" if getattr(rec, "spooled", None) else "recorded"


def _spool_notice(rec: Recorder, server: str) -> None:
    """After a ``--server`` command: say which entries are only spooled, and how to deliver them."""
    from ledger.collectors.remote import RemoteRecorder, spool_size

    if not isinstance(rec, RemoteRecorder):
        return
    for notice in rec.notices():
        warn(notice)
    if not rec.spooled:
        return
    entries, artifacts = spool_size(rec.ledger)
    n = len(rec.spooled)
    warn(
        f"{n} entr{'y' if n == 1 else 'ies'} of this command only spooled, not recorded on {server} "
        f"({rec.unreachable or 'the server did not take them'}); {entries} entries and {artifacts} "
        f"artifacts wait in {rec.ledger.spool_dir}: deliver them with `ledger push --server {server}`"
    )


def _subject(campaign: str | None, extra: list[str] | None, **known: str | None) -> dict[str, str]:
    subject = {"campaign": campaign or "adhoc", "host": socket.gethostname()}
    subject.update({k: v for k, v in known.items() if v})
    subject.update(parse_subject(extra))
    if subject["campaign"] == "adhoc":
        warn("no --campaign: the entries go to campaign 'adhoc' (a verdict is per campaign)")
    return subject


def _work_dir(home: Path | None, campaign: str, what: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in campaign)[:80]
    if not safe.strip("."):  # "", "." and ".." name no folder of their own: runs/.. is the home itself
        safe = "_" * max(1, len(safe))
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    d = home_path(home) / "runs" / safe / f"{stamp}-{what}-{uuid.uuid4().hex[:6]}"
    d.mkdir(parents=True, exist_ok=True)
    return d


# --- enrol -------------------------------------------------------------------------------------------


@collect_app.command("enrol")
def enrol_cmd(
    server: Annotated[str, typer.Option("--server", envvar="LEDGER_SERVER", help="Ledger server URL.")],
    token: Annotated[
        str, typer.Option("--token", envvar="LEDGER_ADMIN_TOKEN", help="An admin token of that server.")
    ],
    name: Annotated[str | None, typer.Option(help="Key name on the server (default: KEY@HOSTNAME).")] = None,
    home: HomeOption = None,
    key: KeyOption = "collector",
    json_out: JsonOption = False,
) -> None:
    """Enrol this host's collector key on a ledger server (one command per new GPU host).

    Creates the local home (it keeps the private key and the offline spool) and the key when they are
    absent, then sends the public key to the server (`POST /v1/keys`, admin token), which enrols it with
    role collector, signed by its admin key. Re-running it is harmless.
    """
    from ledger.collectors.remote import LedgerClient
    from ledger.errors import HomeNotInitialisedError

    path = home_path(home)
    try:
        ledger = get_ledger(path)
    except HomeNotInitialisedError:
        ledger = init_ledger(path)
        err.print(f"initialised a local home at {path} (this host's keys and spool)")
    if not ledger.has_private_key(key):
        ledger.new_key(key, ["collector"])
        err.print(f"created key {key!r} in {path}")
    host = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in socket.gethostname()) or "host"
    server_name = name or f"{key}@{host}"
    client = LedgerClient(server, token)
    try:
        rec, created = client.enrol_collector(server_name, ledger.signing_key(key).public.b64)
    finally:
        client.close()
    if json_out:
        print_json({**rec, "created": created, "server": server, "local_key": key, "home": str(path)})
        return
    state = "enrolled" if created else "already enrolled"
    out.print(
        f"{state} {rec['name']} (key {rec['key_id'][:16]}, roles {','.join(rec['roles'])}) on {server}; "
        f"collect with: ledger collect host --campaign C --server {server} --token WRITER_TOKEN",
        soft_wrap=True,
    )


# --- host and kernel ---------------------------------------------------------------------------------


@collect_app.command("host")
def host_cmd(
    engine_python: Annotated[
        list[str] | None,
        typer.Option(
            "--engine-python",
            help=(
                "Interpreter of an engine's virtualenv to snapshot (repeatable; default: this interpreter — "
                "the ledger's own). With --campaign, name the interpreter the campaign's engine runs under: "
                "its host-prerequisites gate counts a snapshot only of that one."
            ),
        ),
    ] = None,
    path: Annotated[
        list[Path] | None, typer.Option("--path", help="Also report free disk space here.")
    ] = None,
    home: HomeOption = None,
    key: KeyOption = "collector",
    campaign: CampaignOption = None,
    subject: SubjectOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> None:
    """Record host.probe (OS, kernel, WSL2, GPUs, disks, Python) and env.snapshot (engines, pip freeze)."""
    from ledger.collectors.gpu import scan_gpus
    from ledger.collectors.host import engine_env, host_probe
    from ledger.policy.names import ENGINE_PYTHON

    rec = _recorder(home, key, server, token)
    subj = _subject(campaign, subject)
    if not engine_python and subj["campaign"] != "adhoc":
        # the snapshot the campaign's host gate counts is of the interpreter its engine runs under (fix 164):
        # this one's is recorded as asked, and says nothing of that engine unless the engine ran under it
        warn(
            f"no --engine-python: the env snapshot recorded is of this interpreter ({sys.executable}), the "
            f"ledger's own, not necessarily that of the engine of campaign {subj['campaign']!r}: its "
            f"host-prerequisites gate counts it only where the campaign's job binds this interpreter "
            f"(spec.bindings.{ENGINE_PYTHON}) or, binding none, a launch of the campaign ran it (an item of "
            f"its recorded command) — pass `--engine-python PATH` with the interpreter the engine runs under"
        )
    disks = [("ledger", home_path(home))] + [("path", p) for p in path or []]
    scan = scan_gpus()
    hp = host_probe(disks, gpu_scan=scan)
    work = _work_dir(home, subj["campaign"], "host")
    arts = []
    for name, text in scan.outputs():
        raw = work / name
        raw.write_text(text, encoding="utf-8")
        arts.append(rec.artifact(name, raw, media_type="text/plain"))
    ids = {"host.probe": rec.record("host.probe", subj, hp, artifacts=arts)}
    snapshots = []
    for i, py in enumerate(engine_python or [sys.executable]):
        env = engine_env(py)
        freeze = work / f"pip-freeze-{i}.txt"
        freeze.write_text(env.freeze, encoding="utf-8")
        art = rec.artifact("pip-freeze.txt", freeze, media_type="text/plain")
        eid = rec.record(
            "env.snapshot", subj, {**env.payload, "pip_freeze_artifact": art.digest}, artifacts=[art]
        )
        snapshots.append({"entry": eid, **env.payload})
    if json_out:
        print_json({"host_probe": {"entry": ids["host.probe"], **hp}, "env_snapshots": snapshots})
        return
    gpus = ", ".join(f"{g['name']} ({g.get('memory_total_mib')} MiB)" for g in hp["gpus"]) or hp["gpu_note"]
    out.print(
        Text.assemble(
            (hp["hostname"], "bold"),
            f": {hp['os']}, kernel {hp['kernel']}, {hp['arch']}, "
            f"WSL2={'yes' if hp['wsl2'] else 'no'}, Python {hp['python']}",
        ),
        soft_wrap=True,
    )
    out.print(f"GPUs ({hp['gpu_source']}): {gpus}", soft_wrap=True)
    for d in hp["disks"]:
        out.print(f"disk {d['role']}: {d['path']}: {d.get('free_gib', '?')} GiB free", soft_wrap=True)
    for s in snapshots:
        pk = ", ".join(f"{k} {v}" for k, v in s["packages"].items()) or "no engine packages"
        out.print(f"env {s['interpreter']}: Python {s['python']}; {pk}", soft_wrap=True)
    out.print(f"{_recorded(rec)} host.probe {ids['host.probe'][:16]} and {len(snapshots)} env.snapshot")


@collect_app.command("kernel")
def kernel_cmd(
    since: Annotated[str | None, typer.Option(help="e.g. '2 hours ago' or an ISO time.")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Parse a saved kernel log instead.")] = None,
    home: HomeOption = None,
    key: KeyOption = "collector",
    campaign: CampaignOption = None,
    subject: SubjectOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> None:
    """Record kernel.log: GPU-relevant kernel messages (NVRM Xid, amdgpu resets, MES) as typed events."""
    from ledger.collectors.kernel import KernelRead, kernel_payload, parse_since, read_kernel_log

    rec = _recorder(home, key, server, token)
    subj = _subject(campaign, subject)
    when = parse_since(since) if since else None
    if file is not None:
        try:
            read = KernelRead("file", True, file.read_text(encoding="utf-8", errors="replace"))
        except OSError as e:
            raise InputError(f"cannot read {file}: {e}") from e
    else:
        read = read_kernel_log(when)
    payload = kernel_payload(read, since=when)
    arts = []
    if read.readable:
        raw = _work_dir(home, subj["campaign"], "kernel") / "kernel.log"
        raw.write_text(read.text, encoding="utf-8")
        arts.append(rec.artifact("kernel.log", raw, media_type="text/plain"))
    eid = rec.record("kernel.log", subj, payload, artifacts=arts)
    if json_out:
        print_json({"entry": eid, **payload})
        return
    if not read.readable:
        out.print(f"kernel log not readable: {read.reason} (recorded as such)", soft_wrap=True)
    if payload["events"]:
        print_table(
            ("time", "event", "device", "message"),
            [(ev["time"] or "", ev["kind"], ev["device"] or "", ev["message"]) for ev in payload["events"]],
        )
    out.print(
        f"{len(payload['events'])} GPU event(s) from {read.source}; last reset {payload['last_reset_at']}; "
        f"{_recorded(rec)} kernel.log {eid[:16]}",
        soft_wrap=True,
    )


# --- model ------------------------------------------------------------------------------------------------


@collect_app.command("model")
def model_cmd(
    path: Annotated[Path, typer.Argument(help="Model directory, file, or HF cache snapshot / repo folder.")],
    store: Annotated[bool, typer.Option("--store", help="Copy the files into the artifact store.")] = False,
    repo_id: Annotated[
        str | None, typer.Option(help="Repository id (default: from the HF cache layout).")
    ] = None,
    revision: Annotated[str | None, typer.Option(help="Immutable revision (default: the snapshot).")] = None,
    name: Annotated[
        str | None, typer.Option(help="Subject 'model' (default: repo id or folder name).")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Files hashed in parallel (default: all cores).")
    ] = None,
    home: HomeOption = None,
    key: KeyOption = "collector",
    campaign: CampaignOption = None,
    subject: SubjectOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Record model.pin: every file hashed (BLAKE3 + SHA-256, one read), HF blobs verified.

    Exit 1 when a file does not match its blob name (or a pinned digest), naming the file.
    """
    from ledger.collectors.model import pin_payload, reference_artifacts, resolve_model, scan_model

    rec = _recorder(home, key, server, token)
    src = resolve_model(path)
    subj = _subject(campaign, subject, model=name or repo_id or src.repo_id or src.root.name)
    t0 = time.monotonic()
    if json_out or not sys.stderr.isatty():
        scan = scan_model(src, workers=workers)
    else:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        with Progress(
            TextColumn("hashing"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=err.rich(),
        ) as bar:
            task = bar.add_task("hash", total=None)
            scan = scan_model(
                src,
                workers=workers,
                progress=lambda n: bar.advance(task, n),
                on_total=lambda _files, total: bar.update(task, total=total),
            )
    elapsed = time.monotonic() - t0
    payload = pin_payload(scan, repo_id=repo_id, revision=revision)
    if store:
        arts = [rec.artifact(f"model/{f.rel}"[:200], f.path, sha256=True) for f in scan.files if f.digests]
    else:
        arts = reference_artifacts(scan)
    eid = rec.record("model.pin", subj, payload, artifacts=arts)
    rate = scan.total_size / elapsed / 2**20 if elapsed > 0 else 0.0
    if json_out:
        print_json({"entry": eid, "seconds": round(elapsed, 3), "mib_per_s": round(rate, 1), **payload})
    else:
        out.print(
            f"{len(scan.files)} file(s), {scan.total_size / 2**20:.1f} MiB hashed in {elapsed:.2f} s "
            f"({rate:.0f} MiB/s); layout {src.layout}; verification {payload['verification']}",
            soft_wrap=True,
        )
        for f in scan.failures:
            err.print(Text.assemble(("verification FAILED", "red"), f": {f}"), soft_wrap=True)
        out.print(f"{_recorded(rec)} model.pin {eid[:16]}")
    return Outcome.NO if payload["verification"] == "failed" else Outcome.OK


# --- launch and probe -------------------------------------------------------------------------------------


def _parse_env(items: list[str] | None) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise InputError(f"--env {item!r} must be NAME=VALUE")
        env[k] = v
    return env


@collect_app.command("launch", context_settings={"allow_interspersed_args": False})
def launch_cmd(
    command: Annotated[list[str], typer.Argument(help="The engine command, after --.")],
    engine: Annotated[str, typer.Option(help="vllm, llamacpp, sglang or generic (readiness rules).")],
    ready_url: Annotated[str, typer.Option(help="Base URL of the engine's API, e.g. http://127.0.0.1:8081.")],
    lease: Annotated[float, typer.Option(help="Lease in seconds: the engine is stopped when it ends.")] = 900,
    grace: Annotated[float, typer.Option(help="Seconds between SIGTERM and SIGKILL.")] = 10,
    env: Annotated[list[str] | None, typer.Option("--env", help="Extra NAME=VALUE for the engine.")] = None,
    stop_when_ready: Annotated[bool, typer.Option(help="Stop the engine as soon as it is ready.")] = False,
    attempt: Annotated[int, typer.Option(help="Attempt number within the campaign.")] = 1,
    home: HomeOption = None,
    key: KeyOption = "collector",
    campaign: CampaignOption = None,
    subject: SubjectOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Run an engine in its own process group under a lease; record job and engine.launch.

    It waits for readiness, then supervises the engine until it exits, the lease ends, or Ctrl-C /
    SIGTERM (use `ledger collect probe` meanwhile). Exit 1 when readiness was not reached or the engine
    failed.
    """
    from ledger.collectors.launch import EngineRun, LaunchSpec
    from ledger.collectors.readiness import ENGINES
    from ledger.entries import format_time, now_utc

    if engine not in ENGINES:
        raise InputError(f"--engine must be one of {', '.join(ENGINES)}")
    rec = _recorder(home, key, server, token)
    subj = _subject(campaign, subject, backend=engine)
    spec = LaunchSpec(
        engine=engine,
        command=list(command),
        base_url=ready_url,
        lease_seconds=lease,
        env=_parse_env(env),
        grace_seconds=grace,
        attempt=attempt,
        lease_ends_run=True,  # a ready engine stopped at the end of its lease ran as planned
    )
    run = EngineRun(spec, _work_dir(home, subj["campaign"], "launch"))
    job_id = str(uuid.uuid4())
    started = now_utc()
    job = rec.record(
        "job",
        subj,
        {
            "job_id": job_id,
            "state": "running",
            "lease_seconds": lease,
            "started_at": format_time(started),
            "spec": {"kind": "launch", "engine": engine, "ready_url": ready_url},
        },
    )
    cancelled: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        cancelled.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run.start()
        err.print(f"engine started (pid {run.pgid}, lease {lease:g} s); waiting for readiness at {ready_url}")
        state = run.wait_ready(should_stop=lambda: bool(cancelled))
        if state.ready:
            err.print(
                f"ready in {run.time_to_ready_s} s via {state.endpoint}"
                + ("" if stop_when_ready else "; supervising until exit, lease end or Ctrl-C")
            )
            while not stop_when_ready and not cancelled and run.alive() and run.stop_reason is None:
                time.sleep(0.2)
        reason = "cancelled" if cancelled else ("ready" if stop_when_ready and state.ready else "finished")
        run.stop(reason)
    finally:
        if run.proc is not None:
            run.stop("cancelled")
        for s, h in old.items():
            signal.signal(s, h)
    logs = run.log_files()
    arts = [rec.artifact(n, p, media_type="text/plain") for n, p, _ in logs]
    payload = run.payload()
    launch_id = rec.record("engine.launch", subj, payload, artifacts=arts, refs=[("job", job)])
    failed = (not payload["ready"]) or payload["failure_signature"] is not None
    state_word = "cancelled" if cancelled else ("failed" if failed else "succeeded")
    code, sig = run.exit_status
    final = rec.record(
        "job",
        subj,
        {
            "job_id": job_id,
            "state": state_word,
            "lease_seconds": lease,
            "started_at": format_time(started),
            "ended_at": format_time(now_utc()),
            "exit_code": code if code is not None else (128 + sig if sig else None),
            "cancelled_by": f"{signal.Signals(cancelled[0]).name} to pid {os.getpid()}"
            if cancelled
            else None,
            "reason": payload["failure_signature"],
            "spec": {"kind": "launch", "engine": engine},
        },
        refs=[("job", job)],
    )
    if json_out:
        print_json({"job": job, "job_final": final, "engine_launch": launch_id, **payload})
    else:
        _print_launch(payload, launch_id, _recorded(rec))
    return Outcome.NO if failed else Outcome.OK


def _print_launch(p: dict[str, Any], entry: str, recorded: str = "recorded") -> None:
    status = f"ready in {p['time_to_ready_s']} s ({p['ready_endpoint']})" if p["ready"] else "never ready"
    ended = f"exit {p['exit_code']}" if p["exit_code"] is not None else f"signal {p['signal']}"
    out.print(
        f"engine {p['engine']}: {status}; {ended}; stop: {p['details']['stop_reason']}"
        + ("; lease expired" if p["lease_expired"] else ""),
        soft_wrap=True,
    )
    if p["failure_signature"]:
        out.print(
            Text.assemble(
                ("failure signature", "red"), f": {p['failure_signature']} — {p['failure_detail'] or ''}"
            ),
            soft_wrap=True,
        )
    if p["phases"]:
        out.print("phases: " + ", ".join(f"{k}={v}" for k, v in sorted(p["phases"].items())), soft_wrap=True)
    out.print(f"{recorded} engine.launch {entry[:16]}")


@collect_app.command("probe")
def probe_cmd(
    url: Annotated[str, typer.Argument(help="Base URL of the engine's API.")],
    engine: Annotated[
        str, typer.Option(help="vllm, llamacpp, sglang or generic (readiness rules).")
    ] = "generic",
    expect: Annotated[str | None, typer.Option(help="Bounded completion must answer exactly this.")] = None,
    structured: Annotated[bool, typer.Option("--structured", help="JSON-schema output control.")] = False,
    structured_format: Annotated[str, typer.Option(help="auto, json_schema or json_object.")] = "auto",
    sequential: Annotated[int, typer.Option(help="N sequential requests with latencies.")] = 0,
    model: Annotated[
        str | None, typer.Option(help="Model id (default: the first one /v1/models serves).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Bound on completion tokens.")] = 8,
    job: Annotated[str | None, typer.Option(help="Entry id of the job these probes belong to.")] = None,
    home: HomeOption = None,
    key: KeyOption = "collector",
    campaign: CampaignOption = None,
    subject: SubjectOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Record health.probe entries: health, model identity, completion, structured output, N sequential."""
    from ledger.collectors.probe import (
        probe_completion,
        probe_health,
        probe_models,
        probe_sequential,
        probe_structured,
    )

    if structured_format not in ("auto", "json_schema", "json_object"):
        raise InputError("--structured-format must be auto, json_schema or json_object")
    rec = _recorder(home, key, server, token)
    subj = _subject(campaign, subject)
    refs = [("job", job)] if job else []
    results: list[dict[str, Any]] = [probe_health(url, engine)]
    models = probe_models(url, expect=model)
    results.append(models)
    served = model or models.get("model_identity")
    if expect is not None:
        results.append(probe_completion(url, expect=expect, model=served, max_tokens=max_tokens))
    if structured:
        from ledger.collectors.campaign import structured_schema

        # the schema the qualification policy credits (its structured_schema), never one of our own
        results.append(probe_structured(url, schema=structured_schema(), fmt=structured_format, model=served))
    if sequential > 0:
        results.append(probe_sequential(url, count=sequential, model=served, max_tokens=max(max_tokens, 16)))
    if served and "model" not in subj:
        subj["model"] = served
    rows = []
    for r in results:
        eid = rec.record("health.probe", subj, r, refs=refs)
        rows.append({"entry": eid, **r})
    if json_out:
        print_items(rows)
    else:
        table = []
        for r in rows:
            detail = r.get("error") or r.get("model_identity") or (r.get("text") or "")
            if r["check"] == "sequential" and r.get("details"):
                d = r["details"]
                detail = f"{r['count']} done, p50 {d.get('p50_ms')} ms, max {d.get('max_ms')} ms"
            table.append(
                (
                    r["check"],
                    Text("yes", style="green") if r["ok"] else Text("no", style="red"),
                    r.get("http_status") or "",
                    r.get("latency_ms") or "",
                    str(detail),
                )
            )
        print_table(("check", "ok", "status", "latency ms", "detail"), table)
        if getattr(rec, "spooled", None):
            out.print(f"{len(rows)} health.probe {_recorded(rec)}")
    return Outcome.OK if all(r["ok"] for r in rows) else Outcome.NO


# --- harnesses: benchmark and semantic, standalone ---------------------------------------------------------

PolicyOption = Annotated[
    str,
    typer.Option(
        "--policy", help="Qualification policy whose bounds and threshold judge the run (name or path)."
    ),
]


def _harness_policy(policy: str) -> Any:
    from ledger.policy.loader import load_policy

    return load_policy(policy)


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as e:
        raise InputError(f"--levels must be comma-separated integers, not {text!r}") from e
    if not levels:
        raise InputError("--levels names no concurrency level")
    return levels


# A standalone harness run's URL: the policy credits it only at the endpoint its campaign's launch served at
_HARNESS_URL_HELP = (
    "Base URL of the engine's OpenAI-compatible API, as the campaign's engine launch records it (its "
    "details.base_url, e.g. http://127.0.0.1:8081): the run records the endpoint it measured, and the "
    "policy credits it only where that is the endpoint the launch of its attempt served at "
    "(harness-other-endpoint; compared as written: 127.0.0.1, localhost and 0.0.0.0 are different hosts)."
)


def _print_gate(entry: str, payload: dict[str, Any], figures: list[str]) -> None:
    colour = "green" if payload["status"] == "passed" else "red"
    out.print(Text.assemble(f"gate {payload['gate']}: ", (payload["status"], colour), f"  entry {entry}"))
    bounds = payload.get("bounds") or {}
    if bounds.get("endpoint"):
        out.print(Text(f"  measured {bounds['endpoint']}"))
    if payload.get("reason"):
        out.print(Text(f"  {payload['reason']}"))
    shown = payload.get("figures") or {}
    for name in figures:
        if name in shown:
            out.print(Text(f"  {name} = {shown[name]}"))


@collect_app.command("benchmark")
def benchmark_cmd(
    url: Annotated[str, typer.Argument(help=_HARNESS_URL_HELP)],
    corpus: Annotated[Path, typer.Option(help="Benchmark corpus (JSONL; campaigns/README.md).")],
    digest: Annotated[str, typer.Option(help="blake3:… of the corpus bytes (refused if it differs).")],
    levels: Annotated[str, typer.Option(help="Concurrency levels, comma-separated.")] = "1,4,32",
    requests: Annotated[int, typer.Option(help="Requests per level.")] = 96,
    repetitions: Annotated[int, typer.Option(help="Repetitions of the whole level sequence.")] = 2,
    saturation: Annotated[
        str | None,
        typer.Option(
            help="invalid (over-saturation invalidates the run) or report; default, and the only values "
            "credited: the policy's for the engine."
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            help="The engine the endpoint runs (vllm, llamacpp, …). The policy's rule for a named engine "
            "(benchmark_saturation_report_engines) needs the engine's version detected in its interpreter, "
            "which only `ledger collect run` does: a standalone run is judged by the policy's default rule."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Model id (default: the one served; refused where it serves several).")
    ] = None,
    lease: Annotated[float, typer.Option(help="Bound on the whole run, seconds.")] = 900.0,
    policy: PolicyOption = "backend-qualification",
    job: Annotated[str | None, typer.Option(help="Entry id of the job this run belongs to.")] = None,
    home: HomeOption = None,
    key: KeyOption = "collector",
    campaign: CampaignOption = None,
    subject: SubjectOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Run the benchmark harness against URL and record its `gate.result` (bounds: the policy's)."""
    from ledger.collectors.benchmark import (
        BenchmarkSpec,
        policy_bounds,
        policy_validity,
        record_benchmark_gate,
        run_benchmark,
    )
    from ledger.collectors.campaign import engine_validity

    if saturation is not None and saturation not in ("invalid", "report"):
        raise InputError("--saturation must be invalid or report")
    pol = _harness_policy(policy)
    # each run is judged valid as the policy judges it (its spec-mismatch rule compares what the result
    # records), by the campaign's rule: the policy's rule for a named engine follows the engine's version
    # detected in its interpreter, which a standalone run has none of (--engine is a claim), so it gets
    # the policy's default rule; a --saturation the policy would not credit is refused before anything runs
    validity = engine_validity(
        pol.params,
        engine,
        None,
        {"saturation": saturation},
        policy=policy,
        said=lambda _field, value: "--saturation" if value is None else f"--saturation {value}",
        claimed_by="--engine (a standalone run detects no engine version: run it in a campaign)",
    )
    if engine is not None and saturation is None and policy_validity(pol.params, engine) != validity:
        err.print(
            f"benchmark: no engine version is detected by a standalone run: its runs are judged by the "
            f"policy's default rules (saturation {validity['saturation']!r}), not those for engine {engine!r}"
        )
    spec = BenchmarkSpec(
        corpus=corpus,
        corpus_digest=digest,
        concurrency=_levels(levels),
        requests_per_level=requests,
        repetitions=repetitions,
        model=_model_to_ask(url, model),
        lease_s=lease,
        **validity,
    )
    rec = _recorder(home, key, server, token)
    subj = _subject(campaign, subject)
    result = run_benchmark(
        spec, url, out_dir=_work_dir(home, subj["campaign"], "benchmark"), params=pol.params
    )
    entry, payload = record_benchmark_gate(
        rec, subj, result, policy_bounds(pol.params), refs=[("job", job)] if job else []
    )
    if json_out:
        print_json({"entry": entry, **payload})
    else:
        _print_gate(entry, payload, ["ttft_ms.p95@c4", "error_rate", "c1_parity"])
    return Outcome.OK if payload["status"] == "passed" else Outcome.NO


def _model_to_ask(url: str, model: str | None) -> str | None:
    """The model a standalone harness run asks for: ``--model``, else the endpoint's one served model
    (the harness reads ``/v1/models`` itself). An endpoint that serves several is refused before anything
    runs: an alias or adapter listed first is not the approved model, and which one is the caller's to
    say. An endpoint that cannot answer is left to the harness, which records it as the engine's fault."""
    if model is not None:
        return model
    import httpx

    try:
        r = httpx.get(url.rstrip("/") + "/v1/models", timeout=10.0, trust_env=False)
        listed = r.json().get("data") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    ids = (
        sorted({str(m.get("id")) for m in listed if isinstance(m, dict)}) if isinstance(listed, list) else []
    )
    if len(ids) > 1:
        raise InputError(
            f"{url} serves {len(ids)} models ({', '.join(ids)}) and --model names none",
            hint="name the campaign's approved served model with --model",
        )
    return None


@collect_app.command("semantic")
def semantic_cmd(
    url: Annotated[str, typer.Argument(help=_HARNESS_URL_HELP)],
    corpus: Annotated[Path, typer.Option(help="Semantic corpus (JSONL; campaigns/README.md).")],
    digest: Annotated[str, typer.Option(help="blake3:… of the corpus bytes (refused if it differs).")],
    model: Annotated[
        str | None, typer.Option(help="Model id (default: the one served; refused where it serves several).")
    ] = None,
    lease: Annotated[float, typer.Option(help="Bound on the whole run, seconds.")] = 600.0,
    policy: PolicyOption = "backend-qualification",
    job: Annotated[str | None, typer.Option(help="Entry id of the job this run belongs to.")] = None,
    home: HomeOption = None,
    key: KeyOption = "collector",
    campaign: CampaignOption = None,
    subject: SubjectOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Score the semantic corpus against URL and record its `gate.result` (threshold: the policy's)."""
    from ledger.collectors.semantic import SemanticSpec, record_semantic_gate, run_semantic

    pol = _harness_policy(policy)
    min_score = pol.params.get("semantic_min_score")
    if isinstance(min_score, bool) or not isinstance(min_score, int | float):
        raise InputError(f"policy {policy} sets no semantic_min_score")
    spec = SemanticSpec(corpus=corpus, corpus_digest=digest, model=_model_to_ask(url, model), lease_s=lease)
    rec = _recorder(home, key, server, token)
    subj = _subject(campaign, subject)
    result = run_semantic(spec, url, out_dir=_work_dir(home, subj["campaign"], "semantic"), params=pol.params)
    entry, payload = record_semantic_gate(
        rec, subj, result, min_score=float(min_score), refs=[("job", job)] if job else []
    )
    if json_out:
        print_json({"entry": entry, **payload})
    else:
        _print_gate(entry, payload, ["score"])
    return Outcome.OK if payload["status"] == "passed" else Outcome.NO


# --- run ----------------------------------------------------------------------------------------------------


@campaign_app.command("init")
def campaign_init_cmd(
    engine: Annotated[str, typer.Option(help="The engine: vllm or llamacpp.")],
    model: Annotated[
        str,
        typer.Option(help="A local model path (folder or GGUF file) or a Hugging Face repo id (org/name)."),
    ],
    host: Annotated[
        str, typer.Option(help="The host the campaign runs on (subject host; what a deployment file names).")
    ],
    gpus: Annotated[
        str | None, typer.Option(help="GPU indexes the engine uses, e.g. 0,1 (CUDA_VISIBLE_DEVICES).")
    ] = None,
    cpu: Annotated[
        bool,
        typer.Option(
            "--cpu",
            help="A CPU-only host: the host gate requires no GPU (and a small disk minimum), the engine "
            "command names no GPU option. Not with --gpus. Without it the host gate expects a GPU.",
        ),
    ] = False,
    python: Annotated[
        str | None, typer.Option(help="The engine's interpreter (default: $VLLM_PYTHON / $LLAMACPP_PYTHON).")
    ] = None,
    campaign: CampaignOption = None,
    out: Annotated[
        Path | None, typer.Option(help="Where to write it (default: <campaign id>.toml here).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Write a campaign file for ENGINE + MODEL on HOST from campaigns/templates, checked by the loader
    `ledger collect run` uses; the corpora and the benchmark spec stay the ones the policy approves. Its
    host gate requires a GPU unless --cpu."""
    from ledger.collectors.campaign_init import init_campaign

    gpu_list = _gpu_indexes(gpus) if gpus is not None else None
    c = init_campaign(
        engine, model, host, out=out, force=force, gpus=gpu_list, python=python, campaign=campaign, cpu=cpu
    )
    host_gate = c.spec.gates.host
    if json_out:
        print_json(
            {
                "path": str(c.path),
                "campaign": c.id,
                "host": c.spec.campaign.host,
                "engine": engine,
                "require_gpu": host_gate.require_gpu,
                "min_disk_free_gib": host_gate.min_disk_free_gib,
            }
        )
    else:
        device = (
            "its host gate requires a GPU (on a CPU-only host: campaign init --cpu)"
            if host_gate.require_gpu
            else "its host gate requires no GPU"
        )
        sys.stdout.write(
            f"wrote {c.path} (campaign {c.id}); {device}; run it with: ledger collect run {c.path}\n"
        )


def _gpu_indexes(text: str) -> list[int]:
    from ledger.collectors.campaign_init import parse_gpus

    return parse_gpus(text)


@collect_app.command("run")
def run_cmd(
    campaign_file: Annotated[Path, typer.Argument(help="Campaign TOML (see campaigns/README.md).")],
    home: HomeOption = None,
    key: KeyOption = "collector",
    campaign: CampaignOption = None,
    server: ServerOption = None,
    token: TokenOption = None,
    policy: PolicyOption = "backend-qualification",
    json_out: JsonOption = False,
) -> Outcome | Cancelled:
    """Run a qualification campaign: job, gate ladder, evidence; print the summary. Exit 1 when a gate failed.

    Ctrl-C or SIGTERM cancels cleanly: engine stopped, job recorded cancelled (exit 128+signal).
    """
    from ledger.collectors.campaign import CampaignRunner, load_campaign, policy_verdict

    c = load_campaign(campaign_file)
    rec = _recorder(home, key, server, token)
    cid = campaign or c.id
    runner = CampaignRunner(
        c,
        rec,
        work_dir=_work_dir(home, cid, "run"),
        log=(lambda _m: None) if json_out else (lambda m: err.print(Text(m, style="dim"), soft_wrap=True)),
        policy=_harness_policy(policy),
    )
    if campaign:
        runner.subject["campaign"] = campaign
        runner.result.campaign = campaign
    stopped: LedgerError | None = None
    try:
        result = runner.run()
    except LedgerError as e:
        if not runner.result.entries:
            raise  # nothing recorded: exit 2, as every error
        # the collector stopped once its job was recorded (the job ended failed, saying why): what it
        # recorded is judged and summed up like any run's, the error printed, and the run exits 1 — exit 2
        # says nothing was recorded
        stopped, result = e, runner.result
    derived = policy_verdict(rec, runner.subject, runner.policy)
    result.policy_verdict = derived["verdict"] if derived is not None else None
    result.policy_gates = _policy_gates(derived)
    if json_out:
        print_json({**result.to_json(), **({"error": stopped.to_dict()} if stopped is not None else {})})
    else:
        _print_summary(result, _recorded(rec))
    if stopped is not None:
        if not json_out:  # under --json: the result's "error"
            err.print(Text(stopped.one_line()), soft_wrap=True)
        return Outcome.NO
    if result.state == "cancelled" and result.exit_signal:
        return Cancelled(result.exit_signal)
    # the policy's word decides
    return Outcome.OK if (result.policy_verdict or result.verdict_hint) == "QUALIFIED" else Outcome.NO


def _policy_gates(derived: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Each gate of a derived verdict as the policy judged it: name → {"status", "reason", "evidence"}."""
    if derived is None:
        return {}
    return {
        str(g["name"]): {"status": g.get("status"), "reason": g.get("reason"), "evidence": g.get("evidence")}
        for g in derived.get("gates") or []
        if isinstance(g, dict) and "name" in g
    }


def _collector_view(r: CampaignResult) -> str:
    """The collector's own view of its steps. Where the policy's verdict is known it names no verdict word:
    the collector's word for its first failed step (PERFORMANCE for a benchmark the engine died under) could
    differ from the policy's, which re-judges the recorded evidence and is the one verdict printed. Nor does
    it call a gate failed that the policy does not: a step that did not pass (a probe the engine refused)
    may leave the gate without evidence (``missing``, INCONCLUSIVE), and the line then says what the policy
    says of that gate."""
    from ledger.collectors.campaign import step_word
    from ledger.policy.model import INCONCLUSIVE, QUALIFIED

    own = "(the collector's own view of its steps)"
    if r.policy_verdict is None:
        return f"{r.verdict_hint} {own}"
    failed = next((g.gate for g in r.gates if g.status == "failed"), None)
    if failed is not None:
        judged = r.policy_gates.get(failed, {}).get("status") if r.policy_gates else None
        if judged == "failed" or (not r.policy_gates and r.policy_verdict not in (QUALIFIED, INCONCLUSIVE)):
            return f"{failed} failed first {own}"
        said = f"{failed} {step_word('failed')} first {own}"
        if judged:
            return f"{said}; the policy: {failed} {judged}"
        return f"{said}; the policy has no gate {failed}" if r.policy_gates else said
    if r.state != "cancelled" and r.gates and all(g.status == "passed" for g in r.gates):
        return f"every step passed {own}"
    return f"not every step ran {own}"


_COLOUR = {
    "passed": "green",
    "failed": "red",
    "missing": "yellow",
    "not_authorized": "yellow",
    "not_run": "dim",
}


def _gate_rows(r: CampaignResult) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The summary's gate table. With the policy's verdict: each gate's status and reason as the policy
    judged it and the evidence it credits, the collector's step beside it in the step's own words (the
    policy's gates the collector recorded no step for too). Without it: the collector's steps, named as
    steps, with the evidence each recorded."""
    from ledger.collectors.campaign import step_word

    if not r.policy_gates:
        return ("#", "gate", "collector step", "reason", "evidence"), [
            (
                i,
                g.gate,
                Text(step_word(g.status), style=_COLOUR.get(g.status, "")),
                g.reason or "",
                len(g.evidence),
            )
            for i, g in enumerate(r.gates, start=1)
        ]
    rows: list[tuple[Any, ...]] = []
    steps = {g.gate: g for g in r.gates}
    names = [g.gate for g in r.gates] + [n for n in r.policy_gates if n not in steps]
    for i, name in enumerate(names, start=1):
        judged = r.policy_gates.get(name)
        status = str(judged["status"]) if judged and judged.get("status") else "not judged"
        step = steps.get(name)
        did = "—" if step is None else step_word(step.status) + (f": {step.reason}" if step.reason else "")
        reason = str(judged.get("reason") or "") if judged else "no gate of the policy"
        used = judged.get("evidence") if judged else None
        count = len(used) if isinstance(used, list) else "—"
        rows.append((i, name, Text(status, style=_COLOUR.get(status, "")), reason, did, count))
    return ("#", "gate", "policy", "policy's reason", "collector step", "evidence"), rows


def _print_summary(r: CampaignResult, recorded: str = "recorded") -> None:
    headers, rows = _gate_rows(r)
    print_table(headers, rows, title=f"campaign {r.campaign} — job {r.job_id} ({r.state})")
    if r.attempts:
        rows = []
        for x in r.attempts:
            ended = f"exit {x['exit_code']}" if x["exit_code"] is not None else f"signal {x['signal']}"
            rows.append(
                (
                    x["attempt"],
                    x["name"],
                    "yes" if x["ready"] else "no",
                    f"{x['time_to_ready_s']} s" if x["time_to_ready_s"] is not None else "—",
                    ended,
                    x["failure_signature"] or "",
                )
            )
        print_table(
            ("#", "attempt", "ready", "time to ready", "exit", "signature"), rows, title="engine attempts"
        )
    out.print(f"collector gates: {_collector_view(r)}", soft_wrap=True)
    # a command a user can paste: a campaign id with spaces or quotes is quoted for the shell
    again = f"ledger verdict --subject {shlex.quote(f'campaign={r.campaign}')}"
    if r.policy_verdict is not None:
        out.print(f"policy verdict: {r.policy_verdict} (`{again}`)", soft_wrap=True)
    else:
        out.print(f"policy verdict: run `{again}` where it was recorded", soft_wrap=True)
    out.print(
        f"job entry {r.job_entry[:16]}, terminal entry {(r.final_entry or '')[:16]}, "
        f"{len(r.entries)} entries {recorded}",
        soft_wrap=True,
    )


# --- push -----------------------------------------------------------------------------------------------


def push(
    server: Annotated[str, typer.Option(envvar="LEDGER_SERVER", help="Ledger server URL.")],
    token: Annotated[str | None, typer.Option(envvar="LEDGER_TOKEN", help="Writer token.")] = None,
    home: HomeOption = None,
    adopt_untargeted: Annotated[
        bool,
        typer.Option(
            "--adopt-untargeted",
            help="Also deliver to --server what the spool holds without naming a server (spooled by an "
            "older ledger): only when it was collected for that server.",
        ),
    ] = False,
    retry_refused: Annotated[
        bool,
        typer.Option(
            "--retry-refused",
            help="First move back into the spool what --server refused for good earlier (set aside in the "
            "spool's refused/ folder), to send it again: once the server would take it.",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> Outcome:
    """Deliver the entries and artifacts spooled for --server while it was unreachable, in order, exactly
    once. What was spooled for another server is left alone (and named); an entry the server refuses for
    good is set aside in the spool's refused/ folder with the server's reason, and the rest delivered
    (``--retry-refused`` sends what it refused again). Exit 1 while anything is left in the spool."""
    from ledger.collectors.remote import push_spool, restore_refused, spool_bytes

    ledger = get_ledger(home)
    if retry_refused:
        back, back_artifacts = restore_refused(ledger, server, adopt=adopt_untargeted)
        if not json_out:
            sys.stdout.write(
                f"moved back {back} refused entries and {back_artifacts} refused artifacts to send again\n"
            )
    total = spool_bytes(ledger, server, adopt=adopt_untargeted)
    with progress("pushing", total=total, unit="bytes", quiet=json_out) as bar:
        report = push_spool(
            ledger, server=server, token=token, progress=bar.advance, adopt_untargeted=adopt_untargeted
        )
    if json_out:
        print_json(report.to_json())
    else:
        sys.stdout.write(
            f"delivered {report.delivered} entries ({report.duplicates} already there), "
            f"{report.artifacts} artifacts; {report.remaining} still spooled for it "
            f"(and {report.remaining_artifacts} artifacts)\n"
        )
        if report.remaining or report.remaining_artifacts:
            if report.error is not None:
                warn(
                    f"not delivered: {report.error}; "
                    f"run `ledger push --server {server}` again when it is reachable"
                )
            else:  # reachable: what holds them is named below (held for a quarantined artifact, refused)
                warn("not delivered: the server did not take them (see below)")
    for notice in report.notices():
        warn(notice)
    return Outcome.NO if report.left() else Outcome.OK
