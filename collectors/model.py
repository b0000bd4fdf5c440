"""Model pins: every file of a model directory or HF cache snapshot hashed (BLAKE3 + SHA-256, one read),
and, in an HF cache, each blob verified offline against its own name."""

from __future__ import annotations

import hashlib
import mmap
import os
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.entries import ArtifactRef
from ledger.errors import InputError
from ledger.hashing import Digest, FileDigests, HexDigest

__all__ = [
    "ModelScan",
    "ModelSource",
    "git_blob_sha1",
    "pin_payload",
    "reference_artifacts",
    "resolve_model",
    "scan_model",
]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_HF_REPO_DIR = re.compile(r"^(models|datasets|spaces)--(.+)$")


@dataclass(frozen=True)
class ModelSource:
    """A model location: a plain directory (or single file) or a HF cache snapshot."""

    root: Path
    layout: str  # "hf-cache" | "directory"
    repo_id: str | None = None
    revision: str | None = None


@dataclass
class FileCheck:
    rel: str
    path: Path  # the file read (the blob, for a HF cache)
    size: int
    digests: FileDigests | None
    lfs: bool = False
    expected: str | None = None
    verified: bool | None = None
    problem: str | None = None


@dataclass
class ModelScan:
    source: ModelSource
    files: list[FileCheck]

    @property
    def failures(self) -> list[str]:
        return [f"{f.rel}: {f.problem}" for f in self.files if f.problem]

    @property
    def verification(self) -> str:
        if self.failures:
            return "failed"
        if any(f.verified is not None for f in self.files):
            return "passed"
        return "not_applicable"

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def resolve_model(path: Path) -> ModelSource:
    """Recognise ``…/models--org--name/snapshots/<rev>`` as a HF cache snapshot; else a plain directory."""
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"model path {p} does not exist")
    p = p.absolute()
    if p.is_dir() and p.parent.name == "snapshots":
        m = _HF_REPO_DIR.match(p.parent.parent.name)
        if m is not None:
            return ModelSource(p, "hf-cache", m.group(2).replace("--", "/"), p.name)
    if p.is_dir() and (p / "snapshots").is_dir() and _HF_REPO_DIR.match(p.name):
        refs = p / "refs" / "main"
        rev = refs.read_text().strip() if refs.is_file() else None
        snaps = sorted((p / "snapshots").iterdir())
        if rev is None and len(snaps) == 1:
            rev = snaps[0].name
        if rev is None:
            raise InputError(f"{p} holds several snapshots and no refs/main: name one snapshot directory")
        return resolve_model(p / "snapshots" / rev)
    return ModelSource(p, "directory")


# Small slices keep each chunk in the CPU cache between the two hashers; memory mapping avoids a copy.
_SLICE = 256 * 1024


def hash_model_file(path: Path, progress: Callable[[int], object] | None = None) -> FileDigests:
    """BLAKE3 and SHA-256 of one file in a single pass over its memory-mapped bytes."""
    import blake3

    b3 = blake3.blake3()  # one thread per file: files are hashed in parallel instead
    s2 = hashlib.sha256()
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return FileDigests(Digest(HexDigest(b3.hexdigest())), 0, s2.hexdigest())
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            try:
                for off in range(0, size, _SLICE):
                    chunk = view[off : off + _SLICE]
                    b3.update(chunk)
                    s2.update(chunk)
                    chunk.release()
                    if progress is not None:
                        progress(min(_SLICE, size - off))
            finally:
                view.release()
    return FileDigests(Digest(HexDigest(b3.hexdigest())), size, s2.hexdigest())


def hash_model_files(
    paths: Iterable[Path], *, workers: int | None = None, progress: Callable[[int], object] | None = None
) -> dict[Path, FileDigests]:
    """Hash files in parallel threads (both hashers release the GIL), largest first."""
    items = sorted(set(paths), key=lambda p: -p.stat().st_size)
    n = max(1, min(len(items), workers or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=n) as pool:
        return dict(zip(items, pool.map(lambda p: hash_model_file(p, progress), items), strict=True))


def git_blob_sha1(path: Path) -> str:
    """The git object id of a file's content (how the Hub names small, non-LFS blobs)."""
    h = hashlib.sha1(usedforsecurity=False)
    size = path.stat().st_size
    h.update(b"blob %d\0" % size)
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _list_files(src: ModelSource) -> list[FileCheck]:
    if src.root.is_file():
        return [FileCheck(src.root.name, src.root, src.root.stat().st_size, None)]
    checks: list[FileCheck] = []
    for dirpath, dirnames, filenames in os.walk(src.root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".cache", "__pycache__"))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(src.root).as_posix()
            if src.layout == "directory" and name.startswith(".ledger-"):
                continue
            target = p.resolve() if p.is_symlink() else p
            if not target.exists():
                checks.append(
                    FileCheck(rel, target, 0, None, problem=f"missing blob {target.name} (dangling link)")
                )
                continue
            fc = FileCheck(rel, target, target.stat().st_size, None)
            if src.layout == "hf-cache" and target.parent.name == "blobs":
                blob = target.name
                if blob.endswith(".incomplete"):
                    fc.problem = f"blob {blob} is an unfinished download"
                elif _SHA256.match(blob):
                    fc.lfs, fc.expected = True, blob
                elif _SHA1.match(blob):
                    fc.expected = blob
                else:
                    fc.problem = f"blob name {blob!r} is not a SHA-256 or git SHA-1"
            checks.append(fc)
    return checks


def scan_model(
    src: ModelSource,
    *,
    workers: int | None = None,
    progress: Callable[[int], object] | None = None,
    on_total: Callable[[int, int], object] | None = None,
) -> ModelScan:
    """Hash every file (files in parallel, BLAKE3 and SHA-256 in one read) and verify HF blob names."""
    checks = _list_files(src)
    todo = [c for c in checks if c.problem is None or c.size]
    if on_total is not None:
        on_total(len(todo), sum(c.size for c in todo))
    digests = hash_model_files([c.path for c in todo], workers=workers, progress=progress) if todo else {}
    for c in todo:
        c.digests = digests[c.path]
        if c.expected is None or c.problem:
            continue
        if c.lfs:
            actual = c.digests.sha256 or ""
            kind = "sha256"
        else:
            actual = git_blob_sha1(c.path)
            kind = "git sha1"
        c.verified = actual == c.expected
        if not c.verified:
            c.problem = f"content {kind} {actual} does not match its blob name {c.expected}"
    return ModelScan(src, checks)


def pin_payload(
    scan: ModelScan, *, repo_id: str | None = None, revision: str | None = None
) -> dict[str, Any]:
    """The ``model.pin`` payload."""
    files = []
    for f in scan.files:
        d = f.digests
        files.append(
            {
                "path": f.rel,
                "size": f.size,
                "sha256": (d.sha256 or "") if d else "",
                "blake3": str(d.blake3) if d else "",
                "lfs": f.lfs,
                "expected": f.expected,
                "verified": f.verified if f.problem is None else False,
            }
        )
    return {
        "repo_id": repo_id or scan.source.repo_id,
        "revision": revision or scan.source.revision,
        "root": str(scan.source.root),
        "layout": scan.source.layout,
        "files": files,
        "total_size": scan.total_size,
        "verification": scan.verification,
        "failures": scan.failures,
    }


def reference_artifacts(scan: ModelScan) -> list[ArtifactRef]:
    """Every hashed file as an artifact recorded by reference (path, size, digests; not copied)."""
    refs = []
    for f in scan.files:
        if f.digests is None:
            continue
        name = f"model/{f.rel}"
        if len(name) > 200:
            name = "model/…" + name[-190:]
        refs.append(
            ArtifactRef(
                name=name,
                digest=str(f.digests.blake3),
                size=f.digests.size,
                media_type="application/octet-stream",
                sha256=f.digests.sha256,
                stored=False,
                path=str(f.path),
            )
        )
    return refs
