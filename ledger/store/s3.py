"""S3-compatible artifact store: ``<prefix>/objects/ab/<64 hex>`` written only after the digest is verified.

Bytes stream into ``<prefix>/incoming/<random>`` (multipart, hashed in the same pass); only when they hash to
what was expected are they copied to their content address, so a reader never sees unverified bytes.
"""

from __future__ import annotations

import contextlib
import queue
import secrets
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, cast
from urllib.parse import parse_qs, urlparse

from ledger.errors import (
    ArtifactCorruptError,
    ArtifactMissingError,
    ArtifactTooLargeError,
    ConfigError,
    IntegrityError,
    LedgerError,
    StorageError,
)
from ledger.hashing import CHUNK_SIZE, Digest, HexDigest, hash_stream
from ledger.store.base import StoredArtifact

__all__ = ["S3Store", "parse_s3_spec"]

_PART = 16 * 1024 * 1024
_SPOOL_IN_MEMORY = 8 * 1024 * 1024


def parse_s3_spec(spec: str) -> tuple[str, str, str | None]:
    """``s3://bucket/prefix?endpoint=URL`` → (bucket, prefix, endpoint)."""
    u = urlparse(spec)
    if u.scheme != "s3" or not u.netloc:
        raise ConfigError(f"not an S3 store: {spec!r} (expected s3://bucket/prefix)")
    endpoint = parse_qs(u.query).get("endpoint", [None])[0]
    return u.netloc, u.path.strip("/"), endpoint


class _HashingReader:
    """Reads from ``stream`` for boto3 while hashing and counting what went past; enforces ``max_size``."""

    def __init__(self, stream: BinaryIO, max_size: int | None) -> None:
        self._stream = stream
        self._max = max_size
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        want = CHUNK_SIZE if n is None or n < 0 else n
        buf = bytearray(want)
        got = 0
        view = memoryview(buf)
        while got < want:
            k = self._stream.readinto(view[got:])  # type: ignore[attr-defined]
            if not k:
                break
            got += k
        self.size += got
        if self._max is not None and self.size > self._max:
            raise ArtifactTooLargeError("artifact exceeds the size limit")
        return bytes(view[:got])


class S3Store:
    """A content-addressed store in an S3 bucket (AWS, MinIO, Ceph, moto …) through boto3."""

    def __init__(
        self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None, client: Any = None
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        if client is None:
            import boto3  # type: ignore[import-untyped]
            from botocore.config import Config  # type: ignore[import-untyped]

            client = boto3.client(
                "s3",
                endpoint_url=endpoint_url,
                config=Config(retries={"max_attempts": 5, "mode": "standard"}),
            )
        self.s3 = client

    @classmethod
    def from_spec(cls, spec: str, *, endpoint_url: str | None = None) -> S3Store:
        bucket, prefix, endpoint = parse_s3_spec(spec)
        return cls(bucket, prefix, endpoint_url=endpoint_url or endpoint)

    @property
    def root(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _key(self, digest: Digest) -> str:
        return f"{self.prefix}/objects/{digest.hex[:2]}/{digest.hex}".lstrip("/")

    def _wrap(self, what: str, e: Exception) -> StorageError:
        return StorageError(f"S3 {what} failed on {self.root}: {e}")

    def init(self) -> None:
        """Create the bucket when it does not exist yet."""
        from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

        try:
            self.s3.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self.s3.create_bucket(Bucket=self.bucket)
            except (ClientError, BotoCoreError) as e:
                raise self._wrap("create bucket", e) from e
        except BotoCoreError as e:
            raise self._wrap("head bucket", e) from e

    def _head(self, digest: Digest) -> dict[str, Any] | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            head: dict[str, Any] = self.s3.head_object(Bucket=self.bucket, Key=self._key(digest))
            return head
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._wrap("head", e) from e
        except BotoCoreError as e:
            raise self._wrap("head", e) from e

    def put_stream(
        self,
        stream: BinaryIO,
        *,
        sha256: bool = False,
        expected: Digest | None = None,
        max_size: int | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> StoredArtifact:
        """Multipart-upload to a temporary key while hashing; copy to the content address once verified."""
        from boto3.s3.transfer import TransferConfig  # type: ignore[import-untyped]
        from botocore.exceptions import BotoCoreError, ClientError

        incoming = f"{self.prefix}/incoming/{secrets.token_hex(16)}".lstrip("/")
        reader = _HashingReader(stream, max_size)
        sink = _Sink()
        cfg = TransferConfig(
            multipart_threshold=_PART, multipart_chunksize=_PART, max_concurrency=4, use_threads=True
        )
        result: dict[str, Any] = {}

        def hasher() -> None:
            """Pull the incoming bytes, hash them, and pass them on to the uploader through the sink."""
            try:
                result["digests"] = hash_stream(
                    cast(BinaryIO, _ReadIntoAdapter(reader)),
                    sha256=sha256,
                    sink=sink.write,
                    progress=progress,
                )
            except BaseException as e:  # re-raised on the caller's side
                result["error"] = e
                sink.abort()
            finally:
                sink.close()

        t = threading.Thread(target=hasher, daemon=True)
        t.start()
        try:
            self.s3.upload_fileobj(sink, self.bucket, incoming, Config=cfg)
        except (ClientError, BotoCoreError) as e:
            sink.abort()
            t.join()
            self._delete(incoming)
            if isinstance(result.get("error"), LedgerError):
                raise result["error"] from e
            raise self._wrap("upload", e) from e
        except BaseException:
            sink.abort()
            t.join()
            self._delete(incoming)
            raise
        t.join()
        if "error" in result:
            self._delete(incoming)
            raise result["error"]
        digests = result["digests"]
        try:
            if expected is not None and digests.blake3 != expected:
                raise IntegrityError(
                    f"uploaded bytes hash to {digests.blake3}, not {expected}", hint="the upload was refused"
                )
            if self._head(digests.blake3) is not None:
                return StoredArtifact(digests.blake3, digests.size, digests.sha256, created=False)
            self.s3.copy(
                {"Bucket": self.bucket, "Key": incoming}, self.bucket, self._key(digests.blake3), Config=cfg
            )
            return StoredArtifact(digests.blake3, digests.size, digests.sha256, created=True)
        except (ClientError, BotoCoreError) as e:
            raise self._wrap("copy", e) from e
        finally:
            self._delete(incoming)

    def _delete(self, key: str) -> None:
        with contextlib.suppress(Exception):
            self.s3.delete_object(Bucket=self.bucket, Key=key)

    def put_file(
        self, path: Any, *, sha256: bool = False, progress: Callable[[int], object] | None = None
    ) -> StoredArtifact:
        with open(path, "rb") as f:
            return self.put_stream(f, sha256=sha256, progress=progress)

    def has(self, digest: Digest) -> bool:
        return self._head(digest) is not None

    def size(self, digest: Digest) -> int:
        head = self._head(digest)
        if head is None:
            raise ArtifactMissingError(f"artifact {digest} is not in the store")
        return int(head["ContentLength"])

    def _download(self, digest: Digest, progress: Callable[[int], object] | None = None) -> BinaryIO:
        """Download into a spooled temp file while hashing; raise unless the bytes match their address."""
        from botocore.exceptions import BotoCoreError, ClientError

        out = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115 (returned open)
        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=self._key(digest))
        except ClientError as e:
            out.close()
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise ArtifactMissingError(f"artifact {digest} is not in the store") from e
            raise self._wrap("download", e) from e
        except BotoCoreError as e:
            out.close()
            raise self._wrap("download", e) from e
        try:
            digests = hash_stream(
                cast(BinaryIO, _ReadIntoAdapter(obj["Body"])), sink=out.write, progress=progress
            )
        except BaseException:
            out.close()
            raise
        if digests.blake3 != digest:
            out.close()
            raise ArtifactCorruptError(
                f"stored artifact {digest} is corrupt (its bytes hash to {digests.blake3})"
            )
        out.seek(0)
        return out  # type: ignore[return-value]

    def verify(self, digest: Digest, *, progress: Callable[[int], object] | None = None) -> None:
        self._download(digest, progress).close()

    def open_verified(self, digest: Digest, *, progress: Callable[[int], object] | None = None) -> BinaryIO:
        return self._download(digest, progress)

    def iter_digests(self) -> Iterator[Digest]:
        prefix = f"{self.prefix}/objects/".lstrip("/")
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                name = obj["Key"].rsplit("/", 1)[-1]
                if len(name) == 64:
                    yield Digest(HexDigest(name))


class _ReadIntoAdapter:
    """Give ``hash_stream`` a ``readinto`` over anything with ``read``."""

    def __init__(self, src: Any) -> None:
        self._src = src

    def readinto(self, buf: memoryview) -> int:
        data = self._src.read(len(buf))
        n = len(data)
        buf[:n] = data
        return n


class _Sink:
    """A pipe between the hashing thread (writer) and boto3's uploader (reader), bounded in memory."""

    def __init__(self, depth: int = 8) -> None:
        self._q: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._buf = b""
        self._eof = False
        self._aborted = threading.Event()

    def _put(self, item: bytes | None) -> None:
        while not self._aborted.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def write(self, data: Any) -> int:
        if self._aborted.is_set():
            raise StorageError("upload aborted")
        b = bytes(data)
        self._put(b)
        return len(b)

    def close(self) -> None:
        self._put(None)

    def abort(self) -> None:
        """Stop both sides: the writer's puts return, the reader sees the end of the stream."""
        self._aborted.set()
        self._eof = True

    def read(self, n: int = -1) -> bytes:
        parts = [self._buf]
        have = len(self._buf)
        while not self._eof and (n is None or n < 0 or have < n):
            try:
                item = self._q.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is None:
                self._eof = True
                break
            parts.append(item)
            have += len(item)
        data = b"".join(parts)
        if n is None or n < 0:
            self._buf = b""
            return data
        self._buf = data[n:]
        return data[:n]
