"""Commands of the HTTP server: ``serve`` and ``tokens``."""

from __future__ import annotations

import errno
import os
import socket
import sys
from typing import Annotated

import typer

from ledger.cli._common import HomeOption, JsonOption, get_ledger, home_path, print_items, print_json
from ledger.errors import PortInUseError

__all__ = ["serve", "tokens_app"]


def _check_bindable(host: str, port: int) -> None:
    """Bind and release the address first, so a busy port is one clear error (exit 2), not uvicorn's."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise PortInUseError(f"cannot listen on {host}:{port}: {e.strerror}", hint="check --host") from e
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise PortInUseError(f"port {port} on {host} is already in use") from e
            raise PortInUseError(f"cannot listen on {host}:{port}: {e.strerror}") from e


tokens_app = typer.Typer(
    help="API bearer tokens (reader, writer, admin), stored hashed.", no_args_is_help=True
)


def serve(
    home: HomeOption = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port (1..65535).")] = 8000,
    database_url: Annotated[str | None, typer.Option(help="Database URL (default: the home's).")] = None,
    store: Annotated[
        str | None, typer.Option(help="Artifact store: a folder or s3://bucket/prefix (default: the home's).")
    ] = None,
    s3_endpoint: Annotated[
        str | None, typer.Option(help="S3-compatible endpoint URL for an s3:// store.")
    ] = None,
    public_reads: Annotated[bool, typer.Option(help="Let anyone read without a token.")] = False,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    max_body: Annotated[int, typer.Option(help="Largest JSON request body, bytes.")] = 16 * 1024 * 1024,
    max_artifact: Annotated[int, typer.Option(help="Largest artifact upload, bytes.")] = 64 * 1024**3,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    log_format: Annotated[
        str, typer.Option(help="Request logs: text (key=value) or json (one object per line).")
    ] = "text",
) -> None:
    """Serve the ledger over HTTP (API under /v1, reviewer pages at /, OpenAPI at /openapi.json)."""
    import uvicorn

    from ledger.api.settings import ENV_VAR, ApiSettings

    if s3_endpoint:
        os.environ["AWS_ENDPOINT_URL_S3"] = s3_endpoint
    from ledger.errors import InputError

    if log_format not in ("text", "json"):
        raise InputError(f"--log-format must be text or json, not {log_format!r}")
    path = home_path(home)
    opened = get_ledger(path)  # refuse early when there is no ledger here
    described = opened.describe()
    opened.close()
    _check_bindable(host, port)
    settings = ApiSettings(
        home=str(path),
        database_url=database_url,
        store=store,
        public_reads=public_reads,
        max_body_bytes=max_body,
        max_artifact_bytes=max_artifact,
        log_format=log_format,
    )
    os.environ[ENV_VAR] = settings.to_env()
    _announce(
        path, database_url or described["database_url"], store or described["store"], settings, host, port
    )
    uvicorn.run(
        "ledger.api.app:create_app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,  # the app writes its own request log (request id, token name, latency)
        timeout_keep_alive=30,
    )


def _announce(path: object, db: str, store: str, settings: object, host: str, port: int) -> None:
    """The start-up line: which home, database and store are served, and whether reads need a token."""
    import json

    from sqlalchemy.engine import make_url

    try:
        db_shown = make_url(db).render_as_string(hide_password=True)
    except Exception:
        db_shown = "(unparsable database URL)"
    public = bool(getattr(settings, "public_reads", False))
    fields = {
        "home": str(path),
        "database": db_shown,
        "store": store,
        "reads": "public" if public else "token required",
        "url": f"http://{host}:{port}",
    }
    if getattr(settings, "log_format", "text") == "json":
        sys.stderr.write(json.dumps({"message": "ledger serve starting", **fields}) + "\n")
    else:
        sys.stderr.write(
            f"ledger serve: home {fields['home']} · database {db_shown} · store {store} · "
            f"reads {fields['reads']} · {fields['url']}\n"
        )
    sys.stderr.flush()


@tokens_app.command("new")
def tokens_new(
    name: str,
    role: Annotated[str, typer.Option(help="reader, writer or admin.")],
    json_out: JsonOption = False,
) -> None:
    """Create a token; it is printed once and only its hash is kept."""
    token, rec = get_ledger().create_token(name, role)
    if json_out:
        print_json({**rec.to_json(), "token": token})
    else:
        sys.stdout.write(token + "\n")
        sys.stderr.write(f"token {rec.name!r} (role {rec.role}) created; it is not shown again\n")


@tokens_app.command("list")
def tokens_list(json_out: JsonOption = False) -> None:
    """Tokens by name and role (never their values)."""
    recs = [t.to_json() for t in get_ledger().list_tokens()]
    if json_out:
        print_items(recs)
        return
    for r in recs:
        state = f"revoked {r['revoked_at']}" if r["revoked_at"] else "live"
        sys.stdout.write(f"{r['id']:>4}  {r['name']:<24} {r['role']:<7} {r['created_at']}  {state}\n")


@tokens_app.command("revoke")
def tokens_revoke(
    name: Annotated[str, typer.Argument(help="Token name (all live ones) or id.")],
    json_out: JsonOption = False,
) -> None:
    """Revoke tokens: requests with them are refused from now on."""
    recs = get_ledger().revoke_token(name)
    if json_out:
        print_items([r.to_json() for r in recs])
    else:
        for r in recs:
            sys.stdout.write(f"revoked token {r.id} {r.name}\n")
