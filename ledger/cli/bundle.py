"""``ledger bundle create | verify | report``: offline reviewer bundles (ledger.bundle)."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from ledger.cli._common import HomeOption, JsonOption, Outcome, SubjectOption, get_ledger, out, print_json
from ledger.cli.witness import TrustPolicyOption, load_policy_option
from ledger.errors import InputError

__all__ = ["bundle_app", "register"]

bundle_app = typer.Typer(
    help="Offline reviewer bundles: one file to re-check a verdict with no ledger, network or database.",
    no_args_is_help=True,
)

PublicKeyOption = Annotated[
    str | None,
    typer.Option(
        "--public-key",
        metavar="VKEY",
        help="The log key: its C2SP verifier key or base64 (`@FILE` reads it from a file). "
        "Default: the bundle's own key (then the bundle only proves itself consistent).",
        show_default=False,
    ),
]


def _key_arg(value: str | None) -> str | None:
    if value is None or not value.startswith("@"):
        return value
    try:
        return Path(value[1:]).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise InputError(f"cannot read the public key file {value[1:]}: {e.strerror}") from e


@bundle_app.command("create")
def create(
    file: Annotated[Path, typer.Argument(help="The bundle file to write (a ZIP).", show_default=False)],
    subject: SubjectOption = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Policy name (in the policy folder) or path to a policy TOML file."),
    ] = None,
    policy_dir: Annotated[
        Path | None,
        typer.Option("--policy-dir", envvar="LEDGER_POLICY_DIR", help="Folder of policy files."),
    ] = None,
    redact: Annotated[
        list[str] | None,
        typer.Option(
            "--redact",
            metavar="NAME",
            help="Bundle this artifact (by name, e.g. stderr.log, or digest) as a digest only (repeatable).",
        ),
    ] = None,
    at: Annotated[
        int | None,
        typer.Option("--at", metavar="SIZE", help="Judge the log as it stood at this size (default: now)."),
    ] = None,
    home: HomeOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Write the subject's entries, the entries its verdict depends on, the artifacts, proofs, the signed
    checkpoint, the keys, the policy bytes and the verdict into one file."""
    from ledger.atomic import write_atomic
    from ledger.bundle import create_bundle
    from ledger.service import Ledger, parse_subject_args

    subj = parse_subject_args(subject or [])
    if not subj:
        raise InputError("a bundle needs a subject, e.g. --subject campaign=NAME")
    pol = Ledger.load_policy(policy or "backend-qualification", policy_dir)
    ledger = get_ledger(home)
    buf = io.BytesIO()
    try:
        manifest = create_bundle(ledger, subj, pol, buf, redact=redact or [], at_size=at)
    finally:
        ledger.close()
    write_atomic(file, buf.getvalue())
    summary = {
        "file": str(file),
        "subject": manifest["subject"],
        "checkpoint": {"size": manifest["checkpoint"]["size"], "root": manifest["checkpoint"]["root"]},
        "entries": len(manifest["entries"]),
        "artifacts": len(manifest["artifacts"]),
        "redacted": [a["digest"] for a in manifest["artifacts"] if a["redacted"]],
        "result_digest": manifest["verdict"]["result_digest"],
        "bytes": len(buf.getvalue()),
    }
    if json_out:
        print_json(summary)
    else:
        out.print(
            f"{file}: {summary['entries']} entries, {summary['artifacts']} artifacts "
            f"({len(summary['redacted'])} redacted), checkpoint size {summary['checkpoint']['size']}, "
            f"{summary['bytes']} bytes",
            soft_wrap=True,
        )
    return Outcome.OK


@bundle_app.command("verify")
def verify(
    file: Annotated[Path, typer.Argument(help="The bundle file.", show_default=False)],
    public_key: PublicKeyOption = None,
    trust_policy: TrustPolicyOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """Check every signature, log record, inclusion proof and digest, and re-derive the verdict with the
    bundled policy bytes; exit 1 and name each problem when anything does not check. Needs no ledger.
    With --trust-policy the bundled checkpoint must carry the policy's quorum of witness cosignatures."""
    from ledger.bundle import verify_bundle

    report = verify_bundle(
        file, public_key=_key_arg(public_key), trust_policy=load_policy_option(trust_policy)
    )
    if json_out:
        print_json(report.to_json())
    else:
        _print_check(report.to_json())
    return Outcome.OK if report.ok else Outcome.NO


def _print_check(r: dict[str, object]) -> None:
    problems = r["problems"]
    assert isinstance(problems, list)
    cp = r["checkpoint"]
    assert isinstance(cp, dict)
    subject = r["subject"]
    assert isinstance(subject, dict)
    shown = " ".join(f"{k}={v}" for k, v in sorted(subject.items()))
    at = (
        f"for {shown} at checkpoint size {cp.get('size')} "
        f"({r['entries']} entries, {r['artifacts']} artifacts, log key {r['log_key']})"
    )
    if not problems:
        out.print(
            Text.assemble(
                ("ok", "green"),
                f": {r['verdict']} {at}; the verdict re-derives byte for byte from the entries the bundle "
                "holds (an entry of the log it leaves out cannot be seen here: docs/INTEROP.md, Limits)",
            ),
            soft_wrap=True,
        )
        return
    # the bundle's claim, not a verdict this check derived
    claim = f"the bundle claims {r['verdict']}" if r["verdict"] else "the bundle holds no verdict"
    out.print(Text.assemble(("problems", "red"), f": {claim} {at}"), soft_wrap=True)
    for p in problems:
        out.print(f"  {p['code']}\t{p['message']}", soft_wrap=True)


@bundle_app.command("report")
def report(
    file: Annotated[Path, typer.Argument(help="The (redacted) bundle file.", show_default=False)],
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write the report here (Markdown).", show_default=False)
    ] = None,
    public_key: PublicKeyOption = None,
    json_out: JsonOption = False,
) -> Outcome:
    """A public report of the bundle: verdict word, ladder, gates and reasons, digests, and what the
    offline check found. Secrets and filesystem paths in any text are replaced."""
    from ledger.bundle import bundle_report, report_markdown, scrub_private_paths, verify_bundle
    from ledger.canonical import canonical_bytes
    from ledger.collectors.secrets import scrub_text

    def scrub(text: str) -> str:
        return scrub_private_paths(scrub_text(text))

    checked = verify_bundle(file, public_key=_key_arg(public_key))
    body = bundle_report(file, checked, scrub=scrub)
    data = canonical_bytes(body) + b"\n" if json_out else report_markdown(body).encode()
    if out_file is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        from ledger.atomic import write_atomic

        write_atomic(out_file, data)
    return Outcome.OK


def register(app: typer.Typer) -> None:
    """Add ``bundle`` to the ledger CLI."""
    app.add_typer(bundle_app, name="bundle")
