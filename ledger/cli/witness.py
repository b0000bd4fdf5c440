"""Witness commands (C2SP tlog-witness): run a witness (``init``, ``add-log``, ``vkey``, ``serve``) and, on a
ledger home, name the witnesses its checkpoints go to (``enrol``, ``status``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ledger.cli._common import HomeOption, JsonOption, get_ledger, home_path, out, print_json

if TYPE_CHECKING:
    from ledger.service import Ledger
    from ledger.witness import TrustPolicy

__all__ = ["TrustPolicyOption", "checkpoint_problems", "load_policy_option", "register", "witness_app"]

witness_app = typer.Typer(
    help="Witnesses: cosign a log's checkpoints (C2SP tlog-witness), or name a home's witnesses.",
    no_args_is_help=True,
)

DirArgument = Annotated[Path, typer.Argument(help="The witness directory (its key, name and state).")]
TrustPolicyOption = Annotated[
    Path | None,
    typer.Option(
        "--trust-policy",
        help="Trust policy (log key, witnesses, quorum; docs/INTEROP.md): the checkpoint must be cosigned "
        "by its quorum.",
    ),
]


def load_policy_option(path: Path | None) -> TrustPolicy | None:
    if path is None:
        return None
    from ledger.witness import load_trust_policy

    return load_trust_policy(str(path))


def checkpoint_problems(ledger: Ledger, size: int, policy: TrustPolicy) -> list[str]:
    """What keeps the home's checkpoint of ``size`` (with the cosignatures kept for it) from meeting the
    trust policy; empty when it does. The log's signature is checked with the policy's log key."""
    from ledger.witness import check_cosigned

    cp = ledger.cosigned(ledger.signed_checkpoint(size=size))
    return check_cosigned(cp.note, policy)[1]


@witness_app.command("init")
def witness_init(
    directory: DirArgument,
    name: Annotated[str, typer.Option(help="The witness's key name, e.g. witness.example.org/w1.")],
    json_out: JsonOption = False,
) -> None:
    """Make a witness: a new Ed25519 key and an empty state (SQLite) in DIR; prints its verifier key."""
    from ledger.witness_store import WitnessHome

    w = WitnessHome.init(directory, name)
    try:
        if json_out:
            print_json({"dir": str(directory), "name": w.name, "vkey": w.vkey})
        else:
            sys.stdout.write(w.vkey + "\n")
    finally:
        w.close()


@witness_app.command("add-log")
def witness_add_log(
    directory: DirArgument,
    vkey: Annotated[str, typer.Option(help="The log's verifier key (`ledger keys export log --vkey`).")],
    json_out: JsonOption = False,
) -> None:
    """Let the witness cosign the log whose checkpoints this key signs (its name is the log's origin)."""
    from ledger.witness_store import WitnessHome

    w = WitnessHome(directory)
    try:
        origin = w.add_log(vkey)
    finally:
        w.close()
    if json_out:
        print_json({"origin": origin})
    else:
        out.print(f"witness {directory} knows log {origin}", soft_wrap=True)


@witness_app.command("vkey")
def witness_vkey_cmd(directory: DirArgument) -> None:
    """Print the witness's cosignature/v1 verifier key (what a log and a trust policy name it by)."""
    from ledger.witness_store import WitnessHome

    w = WitnessHome(directory)
    try:
        sys.stdout.write(w.vkey + "\n")
    finally:
        w.close()


@witness_app.command("serve")
def witness_serve(
    directory: DirArgument,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port (1..65535).")] = 8100,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Serve the witness: POST /add-checkpoint (C2SP tlog-witness)."""
    import uvicorn

    from ledger.api.witness import ENV_DIR
    from ledger.cli.serve import _check_bindable
    from ledger.witness_store import WitnessHome

    w = WitnessHome(directory)  # refuse early when there is no witness here
    vkey = w.vkey
    w.close()
    _check_bindable(host, port)
    os.environ[ENV_DIR] = str(directory.resolve())
    sys.stderr.write(f"ledger witness serve: {vkey} · http://{host}:{port}/add-checkpoint\n")
    sys.stderr.flush()
    uvicorn.run(
        "ledger.api.witness:create_witness_app_from_env",
        factory=True,
        host=host,
        port=port,
        log_level=log_level,
        timeout_keep_alive=30,
    )


@witness_app.command("enrol")
def witness_enrol(
    url: Annotated[str, typer.Argument(help="The witness's submission prefix, e.g. http://127.0.0.1:8100.")],
    vkey: Annotated[str, typer.Argument(help="The witness's verifier key (`ledger witness vkey DIR`).")],
    home: HomeOption = None,
    json_out: JsonOption = False,
) -> None:
    """Submit this home's published checkpoints to a witness from now on ([[witness]] in ledger.toml)."""
    import dataclasses

    from ledger.errors import InputError
    from ledger.home import Home, WitnessConfig
    from ledger.witness import parse_witness_vkey

    name, _ = parse_witness_vkey(vkey)
    if not url.startswith(("http://", "https://")):
        raise InputError(f"witness URL {url!r} is not http(s)")
    h = Home(home_path(home))
    cfg = h.config()
    names = [parse_witness_vkey(w.vkey)[0] for w in cfg.witnesses]
    if name in names:
        raise InputError(f"witness {name!r} is already enrolled", hint="`ledger witness status` lists them")
    cfg = dataclasses.replace(cfg, witnesses=(*cfg.witnesses, WitnessConfig(url=url, vkey=vkey.strip())))
    h.write_config(cfg)
    if json_out:
        print_json({"witness": name, "url": url})
    else:
        out.print(f"enrolled witness {name} at {url}", soft_wrap=True)


@witness_app.command("status")
def witness_status(home: HomeOption = None, json_out: JsonOption = False) -> None:
    """The served checkpoint and, for each enrolled witness, whether it carries its cosignature."""
    ledger = get_ledger(home)
    cp = ledger.served_checkpoint()
    rows: list[dict[str, Any]] = ledger.witness_status(cp)
    if json_out:
        print_json(
            {"size": cp.size, "witnesses": rows, "missing": [r["witness"] for r in rows if not r["cosigned"]]}
        )
        return
    out.print(f"checkpoint size {cp.size}", soft_wrap=True)
    for r in rows:
        state = "cosigned" if r["cosigned"] else f"MISSING (last cosigned size {r['last_cosigned_size']})"
        out.print(f"  {r['witness']}  {r['url']}  {state}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(witness_app, name="witness")
