"""The core commands: init, keys, kinds, put, cat, store, record, review, accept, supersede, show, log,
verify, checkpoint, proof."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger.cli._common import (
    STATE,
    HomeOption,
    JsonOption,
    Outcome,
    SubjectOption,
    err,
    get_ledger,
    get_reader,
    get_store,
    home_path,
    init_ledger,
    out,
    parse_subject,
    print_items,
    print_json,
    print_table,
    progress,
    time_arg,
)
from ledger.cli.witness import TrustPolicyOption, load_policy_option
from ledger.entries import REVIEW_COMMIT
from ledger.errors import InputError, StorageError

if TYPE_CHECKING:
    from ledger.log import Checkpoint
    from ledger.proofs import AuditReport
    from ledger.service import Ledger, LoggedEntry

__all__ = ["register", "root"]

keys_app = typer.Typer(help="Signing keys: enrol, grant roles, revoke.", no_args_is_help=True)
proof_app = typer.Typer(
    help="Inclusion and consistency proofs, and their offline verification.", no_args_is_help=True
)
store_app = typer.Typer(help="The artifact store.", no_args_is_help=True)
tiles_app = typer.Typer(help="The log as C2SP tlog-tiles static files.", no_args_is_help=True)


def _roles(roles: list[str]) -> list[str]:
    """``--role`` values, checked here so that a typo reads as one (not as a payload schema error)."""
    from ledger.entries import ROLES

    for r in roles:
        if r not in ROLES:
            raise InputError(f"unknown role {r!r} (choose from {', '.join(ROLES)})")
    return roles


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"ledger (evidence-ledger) {version('evidence-ledger')}\n")
        raise typer.Exit()


def root(
    home: HomeOption = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    # The root callback (the global ``--home``, ``--version``); no docstring: the app's help is its own.
    STATE.home = home


# --- init and keys ---------------------------------------------------------------------------------


def init(
    home: HomeOption = None,
    database_url: Annotated[
        str | None, typer.Option(help="SQLAlchemy URL (default: SQLite in the home).")
    ] = None,
    store: Annotated[str | None, typer.Option(help="Artifact store folder (default: HOME/store).")] = None,
    json_out: JsonOption = False,
) -> None:
    """Create a ledger home: database (Alembic), artifact store, admin and log keys. A relative --store or
    SQLite file is relative to the current directory; ledger.toml keeps it relative to the home when it is
    inside the home (a copy of the home, `cp -a`, is then a ledger of its own), absolute when not."""
    from ledger.home import absolute_database_url, absolute_store

    path = home_path(home)
    cwd = Path.cwd()
    ledger = init_ledger(
        path,
        database_url=absolute_database_url(database_url, cwd) if database_url else None,
        store=absolute_store(store, cwd) if store else None,
    )
    info = {"home": str(path), **ledger.describe()}
    if json_out:
        print_json(info)
    else:
        out.print(f"initialised ledger at {path}\nadmin key {ledger.root_key_id}")


@keys_app.command("new")
def keys_new(
    name: str,
    role: Annotated[
        list[str], typer.Option("--role", help="collector, reviewer, operator, admin or exporter.")
    ],
    admin: Annotated[str | None, typer.Option(help="Admin key that signs the enrolment.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Generate a key in this home and enrol it with the given roles."""
    rec = get_ledger().new_key(name, _roles(role), admin=admin)
    if json_out:
        print_json(rec.to_json())
    else:
        out.print(f"{rec.key_id}  {rec.name}  roles={','.join(sorted(rec.roles))}")


@keys_app.command("enrol")
def keys_enrol(
    name: str,
    public_key: Annotated[
        str, typer.Option(help="Base64 raw Ed25519 public key (from `ledger keys export`).")
    ],
    role: Annotated[list[str], typer.Option("--role")],
    admin: Annotated[str | None, typer.Option()] = None,
    json_out: JsonOption = False,
) -> None:
    """Enrol a public key generated elsewhere (a collector host's)."""
    entry = get_ledger().enrol_key(name, public_key, _roles(role), admin=admin)
    if json_out:
        print_json(entry.to_json())
    else:
        out.print(f"enrolled {name}: entry {entry.entry_id}")


@keys_app.command("list")
def keys_list(json_out: JsonOption = False) -> None:
    """Enrolled keys with their roles and revocation state."""
    ring = get_ledger().keyring()
    recs = [r.to_json() for r in ring.keys.values()]
    if json_out:
        print_items(recs)
        return
    print_table(
        ("key id", "name", "roles", "revoked at"),
        [(r["key_id"], r["name"], ",".join(r["roles"]), r["revoked_at"] or "") for r in recs],
    )


@keys_app.command("export")
def keys_export(
    name: str,
    vkey: Annotated[
        bool,
        typer.Option(
            "--vkey", help="The C2SP signed-note verifier key (`log` only): <origin>+<key hash>+<key>."
        ),
    ] = False,
) -> None:
    """Print a key's public key (base64 raw Ed25519); `log` is the checkpoint and receipt key."""
    ledger = get_ledger()
    if vkey:
        if name != ledger.log_key_name:
            raise InputError(
                f"--vkey is the log key's ({ledger.log_key_name!r}): its note name is the origin"
            )
        sys.stdout.write(ledger.verifier_key() + "\n")
        return
    sys.stdout.write(ledger.signing_key(name).public.b64 + "\n")


@keys_app.command("revoke")
def keys_revoke(
    name: str,
    reason: Annotated[str, typer.Option(help="Why the key is revoked.")],
    at: Annotated[
        str | None, typer.Option(help="Effective time (RFC 3339, or e.g. '2 hours ago'); default now.")
    ] = None,
    admin: Annotated[str | None, typer.Option()] = None,
    json_out: JsonOption = False,
) -> None:
    """Revoke a key from an effective time on: its earlier entries stay valid, later ones are refused."""
    from ledger.entries import parse_when

    entry = get_ledger().revoke_key(
        name, reason=reason, effective_at=parse_when(at) if at else None, admin=admin
    )
    if json_out:
        print_json(entry.to_json())
    else:
        out.print(f"revoked {name}: entry {entry.entry_id}")


@keys_app.command("grant")
def keys_grant(
    name: str,
    role: Annotated[list[str], typer.Option("--role")],
    admin: Annotated[str | None, typer.Option()] = None,
    json_out: JsonOption = False,
) -> None:
    """Grant more roles to an enrolled key."""
    entry = get_ledger().grant_key(name, _roles(role), admin=admin)
    if json_out:
        print_json(entry.to_json())
    else:
        out.print(f"granted {','.join(role)} to {name}: entry {entry.entry_id}")


def kinds(json_out: JsonOption = False) -> None:
    """Payload kinds, their versions and the roles that may sign them."""
    from ledger.entries import KIND_MODELS, KIND_ROLES

    rows: list[dict[str, Any]] = [
        {"kind": k, "version": v, "roles": sorted(KIND_ROLES[k]), "schema": m.model_json_schema()}
        for (k, v), m in sorted(KIND_MODELS.items())
    ]
    if json_out:
        print_items(rows)
        return
    print_table(("kind", "version", "roles"), [(r["kind"], r["version"], ",".join(r["roles"])) for r in rows])


# --- artifacts ---------------------------------------------------------------------------------------


def put(
    files: Annotated[list[Path], typer.Argument(help="Files to store.")],
    sha256: Annotated[bool, typer.Option(help="Also compute SHA-256.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Stream files into the content-addressed store; one `blake3:<hex>  PATH` line per file."""
    from ledger.store import put_file

    store = get_store()
    results = []
    total = 0
    for f in files:
        with contextlib.suppress(OSError):  # put_file reports it
            total += f.stat().st_size
    with progress("storing", total=total or None, quiet=json_out) as bar:
        for f in files:
            s = put_file(store, f, sha256=sha256, progress=bar.hook)
            results.append(
                {
                    "digest": str(s.digest),
                    "size": s.size,
                    "path": str(f),
                    "sha256": s.sha256,
                    "created": s.created,
                }
            )
            if not json_out:
                sys.stdout.write(f"{s.digest}  {f}\n")
                sys.stdout.flush()
    if json_out:
        print_items(results)


def cat(digest: str) -> None:
    """Write an artifact's bytes to stdout, verified before a byte is written."""
    from ledger.hashing import parse_digest

    d = parse_digest(digest)
    store = get_store()
    size = store.size(d)
    with progress("verifying", total=size) as bar:
        f = store.open_verified(d, progress=bar.hook)  # every byte checked before one is written
    with f, progress("writing", total=size) as bar:
        while chunk := f.read(1024 * 1024):
            sys.stdout.buffer.write(chunk)
            bar.advance(len(chunk))
    sys.stdout.buffer.flush()


@store_app.command("gc")
def store_gc(
    older_than: Annotated[
        float, typer.Option(help="Only temp files untouched for this many seconds.")
    ] = 3600.0,
    json_out: JsonOption = False,
) -> None:
    """Remove temp files left by writers that died mid-put (stored artifacts are never touched)."""
    store = get_ledger().store
    remove = getattr(store, "remove_stale_incoming", None)
    if remove is None:
        raise InputError(
            "this store has no local temp files (S3: use a lifecycle rule for incomplete uploads)"
        )
    count, size = remove(older_than)
    if json_out:
        print_json({"removed": count, "bytes": size})
    else:
        out.print(f"removed {count} incomplete upload(s), {size} bytes")


# --- entries -----------------------------------------------------------------------------------------


def _read_data(data: str) -> Any:
    """The ``--data`` JSON as the log will sign it: parsed strictly, each number kept as typed (one with
    more digits than a float keeps is refused, not rounded unseen), then in its canonical form (RFC 8785:
    ``20.0`` is ``20``), so the CLI judges the very value an API client's signed entry would carry."""
    from ledger.canonical import canonical_bytes, float_as_stated, parse_canonical, parse_json

    if data.startswith("@"):
        p = Path(data[1:])
        try:
            raw: bytes | str = sys.stdin.buffer.read() if data == "@-" else p.read_bytes()
        except OSError as e:
            raise InputError(f"cannot read {p}: {e.strerror}") from e
    else:
        raw = data
    value = parse_json(raw, parse_float=float_as_stated)
    try:
        return parse_canonical(canonical_bytes(value))
    except (ValueError, TypeError, OverflowError) as e:
        raise InputError(f"--data: {e}") from e


def _parse_pairs(items: list[str] | None, what: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k or not v:
            raise InputError(f"{what} {item!r} must be NAME=VALUE")
        pairs.append((k, v))
    return pairs


def record(
    kind: str,
    key: Annotated[str, typer.Option(help="Name of the signing key in this home.")],
    subject: SubjectOption = None,
    data: Annotated[str, typer.Option(help="Payload JSON, or @FILE, or @- for stdin.")] = "{}",
    artifact: Annotated[
        list[str] | None, typer.Option(help="NAME=PATH or NAME=blake3:<hex> (repeatable).")
    ] = None,
    by_reference: Annotated[
        list[str] | None,
        typer.Option("--by-reference", help="NAME=PATH recorded by path, size and digests, not copied."),
    ] = None,
    ref: Annotated[
        list[str] | None, typer.Option(help="REL=ENTRY_ID (repeatable), e.g. supersedes=…")
    ] = None,
    collected_at: Annotated[
        str | None, typer.Option(help="Time the evidence was collected (RFC 3339, or e.g. '10 min ago').")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Sign and append one entry; artifacts are stored first, then the entry refers to them."""
    from ledger.entries import ArtifactRef
    from ledger.hashing import parse_digest

    subj = parse_subject(subject)
    ledger = get_ledger()
    payload = _read_data(data)
    if not isinstance(payload, dict):
        raise InputError("--data must be a JSON object")
    arts: list[ArtifactRef] = []
    for name, value in _parse_pairs(artifact, "--artifact"):
        if value.startswith("blake3:"):
            d = parse_digest(value)
            arts.append(ArtifactRef(name=name, digest=str(d), size=ledger.artifact_size(d)))
        else:
            arts.append(ledger.artifact_ref(name, Path(value)))
    for name, value in _parse_pairs(by_reference, "--by-reference"):
        arts.append(ledger.artifact_ref(name, Path(value), by_reference=True))
    entry = ledger.record(
        kind,
        subj,
        payload,
        key=key,
        artifacts=arts,
        refs=_parse_pairs(ref, "--ref"),
        collected_at=time_arg(collected_at),
    )
    receipt = ledger.receipt(entry)  # kept in the home by the append (`ledger audit` checks it)
    if json_out:
        print_json({**entry.to_json(ledger.signer_names().get(entry.signer)), "receipt": receipt.to_json()})
    else:
        sys.stdout.write(f"{entry.entry_id}  seq={entry.seq}  {entry.kind}\n")


def _print_entries(entries: list[LoggedEntry], names: dict[str, str]) -> None:
    piped = not sys.stdout.isatty()  # a pipe gets the whole id, a terminal a readable prefix
    print_table(
        ("seq", "id", "kind", "subject", "signer", "collected at"),
        [
            (
                e.seq,
                e.entry_id if piped else e.entry_id[:16],
                e.kind,
                " ".join(f"{k}={v}" for k, v in sorted(e.statement.subject.items())),
                names.get(e.signer, e.signer[:12]),
                e.statement.collected_at,
            )
            for e in entries
        ],
    )


def show(
    entry_id: str,
    json_out: JsonOption = False,
    envelope: Annotated[bool, typer.Option(help="Print the stored DSSE envelope bytes.")] = False,
) -> None:
    """One entry, by id or unique id prefix."""
    from rich.text import Text

    ledger = get_reader()
    e = ledger.get(entry_id)
    if envelope:
        sys.stdout.write(e.envelope.decode() + "\n")
        return
    data = e.to_json(ledger.signer_names().get(e.signer))
    if json_out:
        print_json(data)
        return

    def line(label: str, value: str) -> None:
        out.print(Text.assemble((label, "bold"), value), soft_wrap=True)

    for k in ("id", "seq", "kind", "signer_name", "signer", "collected_at", "logged_at"):
        line(f"{k}: ", str(data[k]))
    line("subject: ", " ".join(f"{k}={v}" for k, v in sorted(data["subject"].items())))
    for r in data["refs"]:
        line("ref ", f"{r['rel']} → {r['id']}")
    for a in data["artifacts"]:
        where = "stored" if a.get("stored", True) else f"by reference {a.get('path')}"
        line("artifact ", f"{a['name']}: {a['digest']} ({a['size']} bytes, {where})")
    out.file.flush()
    # the payload verbatim: indented JSON, no highlighting
    sys.stdout.write(json.dumps(data["payload"], indent=2, ensure_ascii=False) + "\n")


def log_cmd(
    subject: SubjectOption = None,
    kind: Annotated[str | None, typer.Option(help="Kind, or a prefix ending in * (key.*).")] = None,
    signer: Annotated[str | None, typer.Option(help="Key name or id.")] = None,
    since: Annotated[
        str | None, typer.Option(help="Logged at or after: RFC 3339, 'yesterday', '2 hours ago' …")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Logged before (same forms as --since).")] = None,
    after: Annotated[int | None, typer.Option(min=0, help="Keyset cursor: entries after this seq.")] = None,
    # at least 1: a page of 0 entries would say "the last page" (next null) of a log that holds more
    limit: Annotated[int, typer.Option(min=1, help="At most this many entries.")] = 100,
    json_out: JsonOption = False,
) -> None:
    """List entries by subject fields, kind, signer and time, in sequence order."""
    from ledger.entries import check_kind_filter

    subj = parse_subject(subject)
    if kind is not None:
        check_kind_filter(kind)
    ledger = get_reader()
    entries = ledger.query(
        subject=subj,
        kind=kind,
        signer=signer,
        since=time_arg(since),
        until=time_arg(until),
        after_seq=after,
        limit=limit,
    )
    if json_out:
        page = ledger.page_json(entries, limit)
        print_json(page)
    else:
        _print_entries(entries, ledger.signer_names())


# --- integrity -----------------------------------------------------------------------------------------


def verify(
    artifacts: Annotated[bool, typer.Option(help="Re-hash every stored artifact.")] = True,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: all cores).")] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="Verify this database (SQLAlchemy URL) instead of the home's, with the home's keys."
        ),
    ] = None,
    since: Annotated[
        Path | None,
        typer.Option(
            "--from",
            "--since-checkpoint",
            help="A signed checkpoint of this log held from before (C2SP note file): prove the log "
            "consistent with it and check only the entries after it.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    receipts: Annotated[
        bool,
        typer.Option(
            "--receipts",
            help="Also check every receipt this home kept against the log, as `ledger audit` does (its "
            "own log's; a server's: `ledger audit --server`).",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> Outcome:
    """Check every signature, chain link, Merkle root, tile, checkpoint and artifact (streaming, in
    bounded memory), and the log against the signed checkpoint this home holds (HOME/checkpoint: a log
    smaller than it, or rewritten before it, is a problem); with --receipts, the receipts this home kept
    too (`ledger audit`); exit 1 on any problem."""
    from rich.text import Text

    ledger = get_ledger(database_url=database_url)
    note = _read_text(since, "the checkpoint file (--from)") if since is not None else None
    with progress("verifying the ledger", total=ledger.size(), unit="entries", quiet=json_out) as bar:
        report = ledger.verify(artifacts=artifacts, workers=workers, since=note, progress=bar.hook)
    audited = audit_report(ledger) if receipts else None
    if audited is not None:  # a problem verify named already (the home's checkpoint) is named once
        named = {(str(p.code), p.message) for p in report.problems}
        audited.problems = [
            p for p in audited.problems if p["entry_id"] or (p["code"], p["message"]) not in named
        ]
    before = receipts_kept_from(ledger)
    if json_out:
        print_json(
            report.to_json()
            if audited is None
            else {**report.to_json(), "receipts": audit_json(audited, before)}
        )
    else:
        for p in report.problems:
            where = f"seq {p.seq} {p.id[:16] if p.id else ''}" if p.seq is not None else "ledger"
            err.print(Text.assemble(("problem", "red"), f" [{p.code}] {where}: {p.message}"), soft_wrap=True)
        status = "ok" if report else f"{len(report.problems)} problem(s)"
        start = f" (from the held checkpoint at {report.checked_from})" if since is not None else ""
        held = f", against the home's checkpoint at {report.anchor}" if report.anchor is not None else ""
        sys.stdout.write(
            f"{status}: {report.size} entries{start}, root {report.root[:16]}…, "
            f"{report.artifacts_checked} artifacts, {report.checkpoints_checked} checkpoints{held}\n"
        )
        if audited is not None:
            print_audit(audited, before)
    return Outcome.OK if report and (audited is None or audited) else Outcome.NO


def audit_report(
    ledger: Ledger, server: str | None = None, token: str | None = None, public_key: str | None = None
) -> AuditReport:
    """The receipts check of ``ledger audit`` (and ``ledger verify --receipts``): the home's own log, or
    (``server``) the log a server was sent entries to. That log is the pinned one (``public_key``, else the
    key this home recorded for the server: ``LEDGER_LOG_VKEY`` or first use, HOME/log-keys.json), else the
    one the receipts kept name, never merely the one the server names now."""
    key = (
        _read_text(Path(public_key[1:]), "the public key file (--public-key @FILE)").strip()
        if public_key and public_key.startswith("@")
        else public_key
    )
    if not server:
        return ledger.audit(public_key=key)
    from ledger.collectors.remote import LedgerClient, log_key, served_log
    from ledger.errors import EntryNotFoundError, LogInconsistentError, RemoteUnavailableError
    from ledger.proofs import audit_refusing_server, audit_server

    client = LedgerClient(server, token)

    def shown(entry_id: str) -> dict[str, Any] | None:
        """What the server shows its readers of an entry (its index, log time, kind, signer), or None."""
        try:
            return client.get_entry(entry_id)
        except EntryNotFoundError:
            return None

    try:
        try:
            served_origin, served_vkey = served_log(client.checkpoint())
        except RemoteUnavailableError as e:
            if e.server_code != LogInconsistentError.code:
                raise
            # the server refuses to sign: its log no longer extends what it handed out — the finding itself;
            # its log is the one pinned for it (never every log but the home's own: another server's)
            return audit_refusing_server(
                ledger.home.receipts(), server=client.server, refusal=e.message, own_origin=ledger.origin,
                shown=shown, public_key=key or log_key(ledger.home_path, client, first_use=False),
            )  # fmt: skip
        return audit_server(
            ledger.home.receipts(),
            client.inclusion,
            server=client.server,
            served_origin=served_origin,
            served_vkey=served_vkey,
            public_key=key or log_key(ledger.home_path, client, first_use=False),
            own_origin=ledger.origin,
            shown=shown,
            artifact_served=client.has_artifact,
        )
    finally:
        client.close()


def receipts_kept_from(ledger: Ledger, server: str | None = None) -> int:
    """The log size from which this home kept receipts of its own log (``receipts_from``: a home upgraded
    from log format 1 by `ledger migrate`, whose ledger kept none, logged that many entries before it did):
    none is expected of them. 0 for a home that kept every one, and for a server's log (``server``)."""
    return ledger.cfg.receipts_from if not server else 0


def audit_json(report: AuditReport, receipts_from: int = 0) -> dict[str, Any]:
    """A receipts check as ``ledger audit --json`` prints it (and ``verify --receipts --json`` under
    ``receipts``): ``receipts_from`` (``receipts_kept_from``) when the home kept receipts only from there."""
    return {**report.to_json(), **({"receipts_from": receipts_from} if receipts_from else {})}


def print_audit(report: AuditReport, receipts_from: int = 0) -> None:
    """An audit's problems on stderr, and its summary line on stdout; first (``receipts_from``: see
    ``receipts_kept_from``) the note that the log's first entries were logged before the home kept
    receipts."""
    from rich.text import Text

    from ledger.proofs import RECEIPTS_UNCHECKED

    if receipts_from:
        err.print(
            f"note: the first {receipts_from} entries of this home's log (index 0..{receipts_from - 1}) were "
            "logged before it kept receipts (a home upgraded from log format 1 by `ledger migrate`): none is "
            "expected of them; `ledger verify` checks them",
            soft_wrap=True,
        )
    for p in report.problems:
        where = f"index {p['index']} {p['entry_id'][:16]}" if p["entry_id"] else "ledger"
        err.print(
            Text.assemble(("problem", "red"), f" [{p['code']}] {where}: {p['message']}"), soft_wrap=True
        )
    status = "ok" if report else f"{len(report.problems)} problem(s)"
    aside = ""
    if report.other_logs and not any(p["code"] == RECEIPTS_UNCHECKED for p in report.problems):
        logs = ", ".join(f"{o} ({n})" for o, n in sorted(report.other_origins.items()))
        aside = f"; {report.other_logs} receipts of other logs set aside: {logs}"
    out.print(
        f"{status}: {report.receipts} receipts of {report.origin} checked, "
        f"newest index {report.newest_index}{aside}",
        soft_wrap=True,
    )


def audit(
    home: HomeOption = None,
    server: Annotated[
        str | None,
        typer.Option("--server", envvar="LEDGER_SERVER", help="Audit the receipts of this ledger server."),
    ] = None,
    token: Annotated[
        str | None, typer.Option("--token", envvar="LEDGER_TOKEN", help="Bearer token for --server.")
    ] = None,
    public_key: Annotated[
        str | None,
        typer.Option(
            help="The log's key: C2SP verifier key, base64, or @FILE (default: this home's log key; with "
            "--server, the key this home recorded for that server when it first appended to it, else the "
            "log the receipts kept name)."
        ),
    ] = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Check every receipt this home kept (HOME/receipts.jsonl): each received entry is still in the log,
    at the index and log time its receipt says, under a checkpoint the log signs now; and (the home's own
    log) the log against the signed checkpoint the home holds (HOME/checkpoint). With --server, a server
    that now serves another log than the one the entries were sent to is a problem, and so is an artifact a
    received entry names that the server no longer serves (artifact-missing). Receipts of other logs
    are set aside and named; when every receipt kept is of another log, nothing was checked: a problem.
    Exit 1 on any problem."""
    ledger = get_ledger(home)
    report = audit_report(ledger, server, token, public_key)
    before = receipts_kept_from(ledger, server)
    if json_out:
        print_json(audit_json(report, before))
    else:
        print_audit(report, before)
    return Outcome.OK if report else Outcome.NO


def migrate(
    home: HomeOption = None,
    relocate: Annotated[
        bool,
        typer.Option(
            "--relocate",
            help="This home is a copy (or a move) of an older home whose config names the other home's "
            "files: use this home's own database and store instead.",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Upgrade a home made by an older ledger, in place: its database to this ledger's log format (Alembic
    revision 0002: every Merkle leaf commits the log record; 64-bit seq on PostgreSQL; 0003: witness
    cosignatures; 0004: the hash tiles) and its configuration to paths relative to the home. Checkpoints
    signed before stay checkable; run `ledger verify` after. On SQLite it also takes the query planner's
    statistics when the log has outgrown them (as appends do). A copy of an older home whose config still
    names the original's files is refused (it would migrate the original) until `--relocate` points it at
    its own."""
    import dataclasses

    import sqlalchemy as sa

    from ledger.db import SCHEMA_HEAD, analyse_log, make_engine, schema_revision
    from ledger.db import migrate as upgrade
    from ledger.home import Home

    h = Home(home_path(home))
    cfg = h.config(relocate=relocate)
    engine = make_engine(cfg.database_url)
    try:
        before = schema_revision(engine)
        upgrade(cfg.database_url)
        analyse_log(engine)  # SQLite's planner statistics, when the log has outgrown them
        if before is not None and before < "0002" and not cfg.receipts_from:
            # a ledger of log format 1 kept no receipts: `ledger audit` expects none of these entries
            with engine.connect() as conn:
                logged = int(conn.execute(sa.text("SELECT count(*) FROM log_entries")).scalar_one())
            cfg = dataclasses.replace(cfg, receipts_from=logged)
    finally:
        engine.dispose()
    h.write_config(cfg)
    held = hold_migrated_checkpoint(h.path)

    # the database migrated, as a user can tell it (a password in the URL is not printed)
    database = sa.make_url(cfg.database_url).render_as_string(hide_password=True)
    info = {"home": str(h.path), "database": database, "from_revision": before, "to_revision": SCHEMA_HEAD}
    if json_out:
        print_json(info)
        return
    if before == SCHEMA_HEAD:
        out.print(f"already at revision {SCHEMA_HEAD} ({database})")
    else:
        out.print(f"migrated {h.path}: revision {before} -> {SCHEMA_HEAD} ({database})")
    if held is not None:
        out.print(
            f"holds the signed checkpoint of the migrated log at size {held.size} ({h.checkpoint_path})",
            soft_wrap=True,
        )


def hold_migrated_checkpoint(path: Path) -> Checkpoint | None:
    """After ``ledger migrate``: a home that holds no signed checkpoint (a format-1 home never did) is made
    to hold one of the migrated log as it stands (HOME/checkpoint, outside the database): the anchor
    ``verify``, appends and signing compare the log against (``Ledger._refuse_fork``,
    ``reads.check_extends_held``, ``verify._consistent``), so a later rewrite of history before it is
    named. The checkpoint the home holds already is kept (appends and publications move it on). Returns the
    checkpoint newly held, or None. A home that cannot be written is an error, not a home left unanchored."""
    led = get_ledger(path)  # home-bound: signing a checkpoint holds it (``Ledger._hold``, best effort)
    try:
        if led.held() is not None:
            return None
        cp = led.signed_checkpoint()
        if led.held() is not None:
            return cp
        # ``_hold`` leaves a home it cannot write as it was: write it here, to name why it failed
        try:
            with led.home.checkpoint_lock():
                if led.held() is None:
                    led.home.hold_checkpoint(cp.note)
        except OSError as e:
            raise StorageError(
                f"{led.home.checkpoint_path}: the checkpoint of the migrated log could not be held ({e})",
                hint="make the home writable and run `ledger migrate` again (the database is migrated)",
            ) from e
        return cp
    finally:
        led.close()


def checkpoint(
    size: Annotated[int | None, typer.Option(help="Tree size (default: the whole log).")] = None,
    json_out: JsonOption = False,
) -> None:
    """Sign and publish a checkpoint (C2SP signed note, key name = the origin), cosigned by the witnesses."""
    ledger = get_ledger()
    # the whole log: the sequencer's step (submitted to the home's witnesses too)
    published = ledger.publish_checkpoint(wait=True) if size is None else ledger.checkpoint(size=size)
    cp = ledger.cosigned(published)
    if json_out:
        witnesses = ledger.witness_status(cp)
        print_json(
            {
                **cp.to_json(),
                "witnesses": witnesses,
                "missing_cosignatures": [w["witness"] for w in witnesses if not w["cosigned"]],
                "log_key_name": ledger.note_key_name,
                "log_vkey": ledger.verifier_key(),
                "log_public_key": ledger.log_public_key().b64,
            }
        )
    else:
        sys.stdout.write(cp.note)


@tiles_app.command("export")
def tiles_export(
    directory: Annotated[Path, typer.Argument(help="Folder to write into (made when missing).")],
    size: Annotated[int | None, typer.Option(help="Tree size (default: the whole log).")] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace the folder's checkpoint even where this log does not extend it (or with a "
            "smaller one).",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Write `checkpoint`, `tile/<L>/<N>[.p/<W>]` and `tile/entries/<N>[.p/<W>]` (C2SP tlog-tiles) as static
    files an object store or CDN can serve; each file is replaced atomically, the checkpoint last. The
    folder's checkpoint only moves forward, to a log that still extends it (else exit 2, nothing written)."""
    info = get_ledger().export_tiles(directory, size=size, force=force)
    if json_out:
        print_json(info)
    else:
        out.print(
            f"exported {info['size']} entries to {info['directory']}: "
            f"{info['written']} files written, {info['kept']} kept"
        )


@proof_app.command("inclusion")
def proof_inclusion(
    entry_id: str,
    size: Annotated[int | None, typer.Option(help="Tree size of the checkpoint (default: current).")] = None,
    json_out: JsonOption = False,
) -> None:
    """Inclusion proof of an entry against a signed checkpoint (JSON; `--json` is accepted)."""
    print_json(get_ledger().inclusion(entry_id, size=size))


@proof_app.command("consistency")
def proof_consistency(
    old_size: int, new_size: Annotated[int | None, typer.Argument()] = None, json_out: JsonOption = False
) -> None:
    """Consistency proof between two tree sizes, with both signed checkpoints (JSON; `--json` is accepted)."""
    print_json(get_ledger().consistency(old_size, new_size))


@proof_app.command("verify")
def proof_verify(
    proof: Annotated[Path, typer.Argument(help="Proof JSON from `ledger proof inclusion|consistency`.")],
    public_key: Annotated[
        str | None, typer.Option(help="Log public key: base64, or @FILE (or give --trust-policy).")
    ] = None,
    trust_policy: TrustPolicyOption = None,
    key_name: Annotated[
        str | None,
        typer.Option(help="Key name in the checkpoint's signature (default: the proof's origin)."),
    ] = None,
    checkpoint_file: Annotated[
        Path | None,
        typer.Option("--checkpoint", help="A checkpoint you already hold; the proof must match it."),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Verify a proof offline with only the log's public key (and optionally a checkpoint you hold).

    With --trust-policy the log key is the policy's and the proof's checkpoint must carry its quorum of
    witness cosignatures (refused, exit 2, naming each missing or invalid witness)."""
    from ledger.canonical import parse_json
    from ledger.errors import InputError
    from ledger.proofs import verify_proof_document, verify_with_policy

    held = _read_text(checkpoint_file, "the checkpoint file (--checkpoint)") if checkpoint_file else None
    doc = parse_json(proof.read_bytes())
    policy = load_policy_option(trust_policy)
    if policy is not None:
        if public_key is not None or key_name is not None:
            raise InputError(
                "--trust-policy names the log key: give it alone, without --public-key/--key-name"
            )
        result = verify_with_policy(doc, policy, held)
    elif public_key is None:
        raise InputError("give the log's --public-key or a --trust-policy")
    else:
        pk = (
            _read_text(Path(public_key[1:]), "the public key file (--public-key @FILE)").strip()
            if public_key.startswith("@")
            else public_key
        )
        result = verify_proof_document(doc, pk, key_name, held)
    if json_out:
        print_json(result)
    else:
        sys.stdout.write(f"proof ok: {result['detail']}\n")


# --- shell completion --------------------------------------------------------------------------------


def completion(
    shell: Annotated[str, typer.Argument(help="bash, zsh, fish or powershell.")],
) -> None:
    """Print the shell completion script, e.g. `eval "$(ledger completion bash)"` in ~/.bashrc.

    (`ledger --install-completion` installs it for the shell it detects.)
    """
    from typer._completion_shared import get_completion_script

    shells = ("bash", "zsh", "fish", "powershell")
    if shell not in shells:
        raise InputError(f"unknown shell {shell!r} (choose from {', '.join(shells)})")
    sys.stdout.write(get_completion_script(prog_name="ledger", complete_var="_LEDGER_COMPLETE", shell=shell))
    sys.stdout.write("\n")


# --- review, acceptance, supersession: one command each, over Ledger.record ---------------------------


def _decide(kind: str, entry_id: str, rel: str, key: str, payload: dict[str, Any], json_out: bool) -> None:
    """Record a ``kind`` entry that refs ``entry_id`` with ``rel``; its subject is the target's."""
    ledger = get_ledger()
    target = ledger.get(entry_id)
    entry = ledger.record(
        kind, dict(target.statement.subject), payload, key=key, refs=[(rel, target.entry_id)]
    )
    if json_out:
        print_json(entry.to_json(ledger.signer_names().get(entry.signer)))
    else:
        sys.stdout.write(f"{entry.entry_id}  seq={entry.seq}  {entry.kind} {rel} {target.entry_id}\n")


def review(
    entry_id: Annotated[
        str, typer.Argument(metavar="ENTRY", help="The entry reviewed (id or unique prefix).")
    ],
    key: Annotated[str, typer.Option(help="The reviewer's signing key in this home.")],
    passed: Annotated[
        bool | None, typer.Option("--pass/--fail", help="The review's result (required).", show_default=False)
    ] = None,
    commit: Annotated[
        str | None,
        typer.Option(
            help="The commit reviewed (required with --pass: a PASS credits only the commit it names, "
            "and lifts a FAIL only on a repaired commit)."
        ),
    ] = None,
    summary: Annotated[str | None, typer.Option(help="One line of findings.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Record a review PASS or FAIL of an entry (a `review` that refs it with rel `reviews`)."""
    if passed is None:
        raise InputError("say --pass or --fail")
    if passed and not (commit or "").strip():
        # the acceptance policy credits a PASS only for the commit it names (docs/POLICY.md)
        raise InputError("--pass needs --commit: a review PASS that names no commit credits nothing")
    payload: dict[str, Any] = {"result": "PASS" if passed else "FAIL"}
    if commit:
        if not REVIEW_COMMIT.fullmatch(commit):
            raise InputError(
                f"--commit {commit!r} is not a commit hash (7 to 64 lowercase hex): name the commit "
                "reviewed as `git rev-parse HEAD` prints it, not a branch or tag, which moves"
            )
        payload["commit"] = commit
    if summary:
        payload["summary"] = summary
    _decide("review", entry_id, "reviews", key, payload, json_out)


def accept(
    entry_id: Annotated[
        str, typer.Argument(metavar="ENTRY", help="The entry decided (id or unique prefix).")
    ],
    key: Annotated[str, typer.Option(help="A reviewer's or operator's signing key in this home.")],
    reason: Annotated[str, typer.Option(help="Why (recorded).")],
    reject: Annotated[
        bool, typer.Option("--reject", help="Record `rejected` instead of `accepted`.")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Record an acceptance decision on an entry (an `acceptance` that refs it with rel `subject`)."""
    payload = {"decision": "rejected" if reject else "accepted", "reason": reason}
    _decide("acceptance", entry_id, "subject", key, payload, json_out)


def supersede(
    entry_id: Annotated[
        str, typer.Argument(metavar="ENTRY", help="The entry superseded (id or unique prefix).")
    ],
    key: Annotated[str, typer.Option(help="A reviewer's or operator's signing key in this home.")],
    reason: Annotated[str, typer.Option(help="Why it no longer counts (recorded).")],
    correction: Annotated[str | None, typer.Option(help="The entry that corrects it, if any.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Record a `supersession` of an entry: from then on no verdict credits it."""
    payload: dict[str, Any] = {"reason": reason}
    if correction:
        payload["correction"] = get_ledger().resolve_id(correction)
    _decide("supersession", entry_id, "supersedes", key, payload, json_out)


# --- registration -------------------------------------------------------------------------------------


def register(app: typer.Typer) -> None:
    """Add the core commands and the ``keys``, ``store`` and ``proof`` sub-apps, in help order."""
    for command in (init, kinds, put, cat, record, review, accept, supersede, show):
        app.command()(command)
    app.command("log")(log_cmd)
    app.command()(verify)
    app.command()(checkpoint)
    app.command()(audit)
    app.command()(migrate)
    app.command()(completion)
    app.add_typer(keys_app, name="keys")
    app.add_typer(store_app, name="store")
    app.add_typer(proof_app, name="proof")
    app.add_typer(tiles_app, name="tiles")


def _read_text(path: Path, what: str) -> str:
    """A text file a command was given (a checkpoint note, a key), as UTF-8: one that is not, or cannot
    be read, is ``InputError`` naming it (exit 2), never a traceback."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {what} {path}: {e.strerror or e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            f"{what} {path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
            hint="give the file as the log wrote it: a C2SP signed note or a key, in UTF-8",
        ) from e
