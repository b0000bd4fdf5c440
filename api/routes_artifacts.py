"""Artifacts by address: streamed upload verified before it is visible, streamed download with Range."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, BinaryIO

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from ledger.api.auth import Reader, Writer
from ledger.api.bodies import QueueReader, stream_to
from ledger.api.caching import IMMUTABLE, cache_control, etag, not_modified
from ledger.api.deps import Served, ServedDep
from ledger.api.lookup import artifact_info, content_disposition, is_text, response_media_type
from ledger.api.models import PROBLEM
from ledger.errors import ArtifactMissingError, RangeNotSatisfiableError
from ledger.hashing import Digest, parse_digest

__all__ = ["router"]

router = APIRouter(
    prefix="/v1",
    tags=["artifacts"],
    responses={
        401: PROBLEM,
        403: PROBLEM,
        404: PROBLEM,
        422: PROBLEM,
    },
)

_CHUNK = 1024 * 1024
# one byte range (RFC 9110 14.1.2: its positions are any number of digits); a position of more than
# _POS_DIGITS digits is past the end of any artifact, read without converting it
_RANGE = re.compile(r"^bytes=([0-9]*)-([0-9]*)$")
_POS_DIGITS = 18
DigestPath = Annotated[str, Path(pattern=r"^blake3:[0-9a-f]{64}$", description="blake3:<64 hex>")]
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.put(
    "/artifacts/{digest}",
    openapi_extra=_UPLOAD_BODY,
    summary="Upload an artifact's bytes to its address blake3:<hex> (idempotent)",
)
async def put_artifact(
    request: Request, response: Response, _who: Writer, digest: DigestPath, state: ServedDep
) -> dict[str, Any]:
    expected = parse_digest(digest)
    limit = state.settings.max_artifact_bytes

    def consume(reader: QueueReader) -> Any:
        return state.ledger.put_artifact(reader, expected=expected, max_size=limit)  # type: ignore[arg-type]

    stored = await stream_to(request, consume, limit)
    if stored.created:
        state.metrics.artifact_bytes.inc(stored.size)
        response.status_code = 201
    return {"digest": str(stored.digest), "size": stored.size, "created": stored.created}


def _describe(state: Served, d: Digest, download: bool) -> tuple[str, dict[str, str]]:
    """Content-Type and headers of an artifact: the media type and name its entry recorded."""
    info = artifact_info(state.ledger, str(d))
    media = response_media_type(info.media_type if info else "application/octet-stream")
    headers = {
        "Accept-Ranges": "bytes",
        "ETag": etag(str(d)),
        "Cache-Control": cache_control(state.settings, IMMUTABLE),
        "X-Content-Type-Options": "nosniff",
        # shown inline, an artifact is evidence to read, never a page of this origin that runs
        "Content-Security-Policy": "sandbox; default-src 'none'",
        "Content-Disposition": content_disposition(
            info.name if info else str(d).replace(":", "-"), inline=is_text(media) and not download
        ),
    }
    return media, headers


@router.head("/artifacts/{digest}", summary="Whether the store holds an artifact, and its size")
def head_artifact(state: ServedDep, _who: Reader, digest: DigestPath) -> Response:
    d = parse_digest(digest)
    size = state.ledger.artifact_size(d)
    media, headers = _describe(state, d, download=False)
    return Response(headers={**headers, "Content-Length": str(size)}, media_type=media)


def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end_exclusive)`` of a single byte range, None to serve the whole artifact."""
    if not header:
        return None
    m = _RANGE.fullmatch(header.strip())
    if m is None:
        return None  # several ranges or another unit: RFC 9110 lets us serve the whole representation
    first, last = m.group(1), m.group(2)
    if not first and not last:
        return None
    shown = header.strip()[:80]
    if not first:
        n = int(last) if len(last) <= _POS_DIGITS else size  # a longer suffix: the whole artifact
        if n == 0:
            raise RangeNotSatisfiableError(f"empty suffix range of an artifact of {size} bytes")
        return max(0, size - n), size
    if len(first) > _POS_DIGITS:
        raise RangeNotSatisfiableError(f"range {shown} starts past the end of an artifact of {size} bytes")
    start = int(first)
    end = size if not last or len(last) > _POS_DIGITS else min(int(last) + 1, size)
    if start >= size or (last and len(last) <= _POS_DIGITS and int(last) < start):
        raise RangeNotSatisfiableError(f"range {shown} is outside an artifact of {size} bytes")
    return start, end


def _iter_file(f: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    try:
        f.seek(start)
        left = end - start
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk
    finally:
        f.close()


@router.get(
    "/artifacts/{digest}",
    summary="Download an artifact (verified before the first byte; HTTP Range)",
    response_class=StreamingResponse,
)
async def get_artifact(
    request: Request,
    state: ServedDep,
    _who: Reader,
    digest: str,
    range_header: Annotated[str | None, Header(alias="Range")] = None,
    download: Annotated[bool, Query(description="Content-Disposition: attachment, even for text")] = False,
) -> Response:
    """Served with the media type and file name its entry recorded; ETag: the digest (304 on a match)."""
    ledger = state.ledger
    d: Digest = parse_digest(digest)
    if not await run_in_threadpool(ledger.has_artifact, d):
        raise ArtifactMissingError(f"artifact {d} is not in the store")
    media, headers = await run_in_threadpool(_describe, state, d, download)
    if (unchanged := not_modified(request, headers["ETag"], headers["Cache-Control"])) is not None:
        return unchanged
    size = await run_in_threadpool(ledger.artifact_size, d)
    span = _parse_range(range_header, size)
    f = await run_in_threadpool(ledger.open_artifact, str(d))
    start, end = span or (0, size)
    headers["Content-Length"] = str(end - start)
    status = 200
    if span is not None:
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    return StreamingResponse(_iter_file(f, start, end), status_code=status, headers=headers, media_type=media)
