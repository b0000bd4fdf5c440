"""Reading request bodies within limits, and bridging a streamed body to the store's blocking reader."""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request

from ledger.canonical import parse_json
from ledger.errors import ArtifactTooLargeError, RequestTooLargeError

__all__ = ["QueueReader", "read_json_body", "stream_to"]

T = TypeVar("T")
_HANDOFF = 1024 * 1024  # hand the worker thread 1 MiB at a time
_QUEUE_DEPTH = 16  # at most ~16 MiB of an upload in memory


def _declared_length(request: Request) -> int | None:
    text = request.headers.get("content-length")
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


async def read_json_body(
    request: Request, limit: int, *, parse_float: Callable[[str], Any] | None = None
) -> Any:
    """The request body parsed as strict JSON; 413 past ``limit`` bytes, 400 when it is not JSON
    (``parse_float``: as :func:`ledger.canonical.parse_json`'s)."""
    declared = _declared_length(request)
    if declared is not None and declared > limit:
        raise RequestTooLargeError(f"request body of {declared} bytes exceeds the limit of {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise RequestTooLargeError(f"request body exceeds the limit of {limit} bytes")
    return parse_json(bytes(body), parse_float=parse_float)


class QueueReader:
    """A blocking, file-like reader (``readinto``/``read``) over chunks handed in through a queue."""

    def __init__(self) -> None:
        self.queue: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=_QUEUE_DEPTH)
        self._buf = memoryview(b"")
        self._eof = False

    def _fill(self) -> bool:
        while not self._buf:
            if self._eof:
                return False
            item = self.queue.get()
            if item is None:
                self._eof = True
                return False
            if isinstance(item, BaseException):
                raise item
            self._buf = memoryview(item)
        return True

    def readinto(self, out: memoryview | bytearray) -> int:
        if not self._fill():
            return 0
        n = min(len(out), len(self._buf))
        out[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            parts = []
            while self._fill():
                parts.append(bytes(self._buf))
                self._buf = memoryview(b"")
            return b"".join(parts)
        if not self._fill():
            return b""
        n = min(size, len(self._buf))
        data = bytes(self._buf[:n])
        self._buf = self._buf[n:]
        return data


async def _hand(reader: QueueReader, item: bytes | BaseException | None, worker: asyncio.Future[Any]) -> bool:
    """Put ``item`` on the queue without blocking the event loop; False when the worker has stopped."""
    while True:
        if worker.done():
            return False
        try:
            reader.queue.put_nowait(item)
            return True
        except queue.Full:
            await asyncio.sleep(0.0005)


async def stream_to(request: Request, consume: Callable[[QueueReader], T], limit: int) -> T:
    """Run ``consume(reader)`` in a worker thread while the request body streams into it."""
    declared = _declared_length(request)
    if declared is not None and declared > limit:
        raise ArtifactTooLargeError(f"artifact of {declared} bytes exceeds the limit of {limit}")
    reader = QueueReader()
    loop = asyncio.get_running_loop()
    worker: asyncio.Future[T] = loop.run_in_executor(None, consume, reader)
    pending = bytearray()
    try:
        async for chunk in request.stream():
            pending += chunk
            if len(pending) >= _HANDOFF:
                if not await _hand(reader, bytes(pending), worker):
                    break
                pending.clear()
        else:
            if pending:
                await _hand(reader, bytes(pending), worker)
            await _hand(reader, None, worker)
    except BaseException as e:  # client went away: make the worker discard its temp file
        await _hand(reader, OSError(f"upload interrupted: {e}"), worker)
        with contextlib.suppress(BaseException):
            await worker
        raise
    return await worker
