"""The log's own record: signed checkpoints, inclusion and consistency proofs."""

from __future__ import annotations

import gzip
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from ledger.api.auth import Reader
from ledger.api.caching import IMMUTABLE, cache_control
from ledger.api.deps import LedgerDep, SettingsDep
from ledger.api.models import ENTRY_ID, PROBLEM
from ledger.db import SEQ_MAX
from ledger.errors import EntryNotFoundError, InputError
from ledger.log import Checkpoint
from ledger.service import Ledger
from ledger.tiles import TILE_WIDTH

__all__ = ["router", "tiles"]

EntryIdPath = Annotated[str, Path(pattern=ENTRY_ID, description="entry id or unique prefix (hex, any case)")]

router = APIRouter(
    prefix="/v1",
    tags=["log"],
    responses={401: PROBLEM, 404: PROBLEM, 422: PROBLEM},
)


def checkpoint_at(ledger: Ledger, size: int | None) -> Checkpoint:
    """A checkpoint signed over the log as the database holds it now: a read, so nothing is written and
    no lock is taken (the sequencer publishes the kept ones after appends). A size beyond the log names a
    tree that does not exist (yet): 404."""
    if size is not None and size > (current := ledger.size()):
        raise EntryNotFoundError(
            f"the log has {current} entries; there is no checkpoint at size {size}",
            hint=f"ask for a size from 0 to {current}, or leave size out for the whole log",
        )
    return ledger.signed_checkpoint(size=size)


@router.get("/checkpoint", summary="A signed checkpoint (C2SP signed note, with witness cosignatures)")
def get_checkpoint(
    ledger: LedgerDep,
    _who: Reader,
    size: Annotated[int | None, Query(ge=0, description="tree size (default: whole log)")] = None,
) -> dict[str, Any]:
    cp = ledger.served_checkpoint() if size is None else ledger.cosigned(checkpoint_at(ledger, size))
    witnesses = ledger.witness_status(cp)
    return {
        **cp.to_json(),
        "log_key_name": ledger.note_key_name,
        "log_public_key": ledger.log_public_key().b64,
        "log_vkey": ledger.verifier_key(),
        "witnesses": witnesses,
        "missing_cosignatures": [w["witness"] for w in witnesses if not w["cosigned"]],
    }


@router.get("/proofs/inclusion/{entry_id}", summary="Inclusion proof of an entry against a signed checkpoint")
def proof_inclusion(
    ledger: LedgerDep, _who: Reader, entry_id: EntryIdPath, size: Annotated[int | None, Query(ge=1)] = None
) -> dict[str, Any]:
    return ledger.inclusion(entry_id, size=size)


@router.get("/proofs/consistency", summary="Consistency proof between two tree sizes, with both checkpoints")
def proof_consistency(
    ledger: LedgerDep,
    _who: Reader,
    old: Annotated[int, Query(ge=0)],
    new: Annotated[int | None, Query(ge=0)] = None,
) -> dict[str, Any]:
    return ledger.consistency(old, new)


# --- C2SP tlog-tiles: <prefix>/checkpoint, <prefix>/tile/<L>/<N>[.p/<W>], <prefix>/tile/entries/<N>[.p/<W>]
# The prefix is the server's root. Tiles and bundles are computed from the database on each request.


def _path_as_written(request: Request) -> None:
    """A C2SP path is ASCII digits, ``x``, ``.p`` and slashes: one with a control character is none (audit
    52 f1: the router's ``{index:path}`` is ``.*``, which stops at a newline, and ``$`` matches before a final
    one, so ``tile/0/000.p/5%0A`` reached the handler as ``000.p/5`` and was cached immutable)."""
    path = str(request.scope["path"])  # not request.url.path: it drops what follows a newline
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        raise InputError(f"{path!r} is not a C2SP path: it holds a control character")


tiles = APIRouter(
    tags=["tiles"], responses={401: PROBLEM, 404: PROBLEM}, dependencies=[Depends(_path_as_written)]
)

# A tile or bundle never changes once full; a read that needs a token is ``private`` (no shared cache may
# keep it: RFC 9111 §3.5), ``public`` only on a server started with --public-reads (api/caching.py).
# An entry index is a signed 64-bit integer (SQLite INTEGER, PostgreSQL BIGINT): a bundle past it is none.
_MAX_INDEX = SEQ_MAX
_TILE_PATH = re.compile(r"^((?:x[0-9]{3}/)*)([0-9]{3})(?:\.p/([1-9][0-9]{0,2}))?$")
# C2SP: "<L> MUST be a decimal ASCII integer between 0 and 63, with no additional leading zeroes".
_TILE_LEVEL = re.compile(r"^(0|[1-9][0-9]?)$")
_MAX_LEVEL = 63


def _tile_level(level: str) -> int:
    """``0`` … ``63`` exactly as the spec writes them: no sign, no leading zero, no fraction."""
    if _TILE_LEVEL.fullmatch(level) is None or int(level) > _MAX_LEVEL:
        raise InputError(f"{level!r} is not a tile level (a decimal 0 to {_MAX_LEVEL}, no leading zeroes)")
    return int(level)


def _tile_index(path: str) -> tuple[int, int | None]:
    """``x001/x234/067[.p/W]`` -> (1234067, W): zero-padded 3-digit groups, all but the last after an x."""
    m = _TILE_PATH.fullmatch(path)  # not match: its $ also matches before a final newline (audit 52 f1)
    if m is None:
        raise InputError(f"{path!r} is not a tile index (x001/x234/067, optionally .p/<width>)")
    groups = [g[1:] for g in m.group(1).split("/") if g] + [m.group(2)]
    if len(groups) > 1 and groups[0] == "000":
        raise InputError(f"{path!r}: a tile index has no leading zero group")
    width = int(m.group(3)) if m.group(3) else None
    if width is not None and width > 255:
        raise InputError(f"{path!r}: a partial tile is 1..255 wide")
    return int("".join(groups)), width


@tiles.get("/checkpoint", summary="C2SP: the log's signed checkpoint (text/plain)")
def c2sp_checkpoint(ledger: LedgerDep, settings: SettingsDep, _who: Reader) -> Response:
    cp = ledger.served_checkpoint()  # with the witnesses' cosignatures where the log has witnesses
    headers = {"Cache-Control": cache_control(settings, "max-age=2")}
    return Response(cp.note, media_type="text/plain; charset=utf-8", headers=headers)


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an ``Accept-Encoding`` value (RFC 9110 §12.5.3) takes ``gzip``: named (or ``x-gzip``, or
    ``*``) with a weight above 0; a name named with ``q=0`` is refused, whatever ``*`` says."""
    weights: dict[str, float] = {}
    for item in (accept_encoding or "").split(","):
        name, *params = (part.strip() for part in item.split(";"))
        if not name:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0  # an unreadable weight takes nothing (identity, which every client reads)
        weights[name.lower()] = q
    for name in ("gzip", "x-gzip"):
        if name in weights:
            return weights[name] > 0
    return weights.get("*", 0.0) > 0


@tiles.get("/tile/entries/{index:path}", summary="C2SP: an entry bundle (the log records)")
def c2sp_entries(
    ledger: LedgerDep, settings: SettingsDep, _who: Reader, index: str, request: Request
) -> Response:
    """C2SP: "Entry bundles SHOULD be compressed at the HTTP layer" — gzip where the client's
    ``Accept-Encoding`` takes it (the spec's clients send ``gzip, identity``), else the bytes as they are;
    ``Vary: Accept-Encoding`` either way, so a shared cache keeps the two apart. The bytes are the same
    whichever way they travel (gzip with no timestamp: the same bundle compresses to the same bytes)."""
    n, width = _tile_index(index)
    if n * TILE_WIDTH + (width or TILE_WIDTH) > _MAX_INDEX:  # no log holds it (and no query could ask)
        raise EntryNotFoundError(f"the log has no entry bundle {n}: its entries are past any log index")
    headers = {"Cache-Control": cache_control(settings, IMMUTABLE), "Vary": "Accept-Encoding"}
    body = ledger.entry_bundle(n, width)
    if accepts_gzip(request.headers.get("accept-encoding")):
        body = gzip.compress(body, mtime=0)
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type="application/octet-stream", headers=headers)


@tiles.get("/tile/{level}/{index:path}", summary="C2SP: a Merkle tree hash tile")
def c2sp_tile(
    ledger: LedgerDep,
    settings: SettingsDep,
    _who: Reader,
    level: str,
    index: str,
) -> Response:
    lv, (n, width) = _tile_level(level), _tile_index(index)
    headers = {"Cache-Control": cache_control(settings, IMMUTABLE)}
    return Response(ledger.tile(lv, n, width), media_type="application/octet-stream", headers=headers)


# HEAD answers what GET would, without the body (RFC 9110 §9.3.2): the exported static files answer HEAD from
# any object store or CDN, so `ledger serve` does too (audit 52 f2: 405 here, 200 there).
def _head_of(resp: Response) -> Response:
    return Response(
        status_code=resp.status_code, headers={**resp.headers, "content-length": str(len(resp.body))}
    )


@tiles.head("/checkpoint", summary="C2SP: the checkpoint's headers (HEAD)")
def c2sp_checkpoint_head(ledger: LedgerDep, settings: SettingsDep, who: Reader) -> Response:
    return _head_of(c2sp_checkpoint(ledger, settings, who))


@tiles.head("/tile/entries/{index:path}", summary="C2SP: an entry bundle's headers (HEAD)")
def c2sp_entries_head(
    ledger: LedgerDep, settings: SettingsDep, who: Reader, index: str, request: Request
) -> Response:
    return _head_of(c2sp_entries(ledger, settings, who, index, request))


@tiles.head("/tile/{level}/{index:path}", summary="C2SP: a hash tile's headers (HEAD)")
def c2sp_tile_head(ledger: LedgerDep, settings: SettingsDep, who: Reader, level: str, index: str) -> Response:
    return _head_of(c2sp_tile(ledger, settings, who, level, index))
