"""``ledger export attestation``: entries as in-toto attestations in Sigstore bundles (ledger.export)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ledger.cli._common import HomeOption, Outcome, SubjectOption, get_ledger
from ledger.errors import InputError

__all__ = ["export_app", "register"]

export_app = typer.Typer(help="Export evidence in formats other tools verify.", no_args_is_help=True)


@export_app.command("attestation")
def attestation(
    entry: Annotated[
        str | None, typer.Argument(help="Entry id (or unique prefix).", show_default=False)
    ] = None,
    subject: SubjectOption = None,
    key: Annotated[
        str,
        typer.Option(
            "--key", help="Signing key with the exporter role (ledger keys new NAME --role exporter)."
        ),
    ] = "exporter",
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write here instead of stdout.", show_default=False)
    ] = None,
    home: HomeOption = None,
) -> Outcome:
    """An in-toto Statement v1 (DSSE, application/vnd.in-toto+json) in a Sigstore bundle v0.3 with the
    entry's inclusion proof and checkpoint: one JSON bundle for ENTRY, JSON Lines for --subject."""
    from ledger.canonical import canonical_bytes
    from ledger.export import attestation_bundle, subject_bundles
    from ledger.service import parse_subject_args

    if (entry is None) == (not subject):
        raise InputError("name one entry, or the subject's entries with --subject FIELD=VALUE (not both)")
    ledger = get_ledger(home)
    try:
        if entry is not None:
            data = canonical_bytes(attestation_bundle(ledger, entry, key=key)) + b"\n"
        else:
            bundles = subject_bundles(ledger, parse_subject_args(subject or []), key=key)
            data = b"".join(canonical_bytes(b) + b"\n" for b in bundles)
    finally:
        ledger.close()
    if out_file is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        from ledger.atomic import write_atomic

        write_atomic(out_file, data)
    return Outcome.OK


def register(app: typer.Typer) -> None:
    """Add ``export`` to the ledger CLI."""
    app.add_typer(export_app, name="export")
