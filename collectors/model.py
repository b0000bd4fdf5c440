"""Model pins: every file of a model directory or HF cache snapshot hashed (BLAKE3 + SHA-256, one read),
and, in an HF cache, each blob verified offline against its own name; a model named by one GGUF file is
every split of its set (``gguf_split_set``), as llama.cpp loads it; of a folder, every shard the engine
would load must be a file of it (``check_weight_indexes``): each file named in the ``weight_map`` of a
weight index vLLM reads in the model's own folder, and each shard of a set named by HF's shard naming where
its format has no index there."""

from __future__ import annotations

import errno
import hashlib
import json
import mmap
import os
import re
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any

from ledger.canonical import canonical_bytes
from ledger.entries import ArtifactRef
from ledger.errors import InputError
from ledger.hashing import Digest, FileDigests, HexDigest, blake3_hex

__all__ = [
    "ModelListing",
    "ModelScan",
    "ModelSource",
    "check_weight_indexes",
    "gguf_split_set",
    "git_blob_sha1",
    "list_files",
    "list_model",
    "pin_payload",
    "reference_artifacts",
    "resolve_model",
    "scan_model",
]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_HF_REPO_DIR = re.compile(r"^(models|datasets|spaces)--(.+)$")
_REVISION = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
# llama.cpp's split naming (llama_split_path: "%s-%05d-of-%05d.gguf"): given one split it loads the others
# beside it by this name, for split numbers 1 … split.count
_GGUF_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$")
_GGUF_MAGIC = b"GGUF"
# the header keys a split set is read by (gguf's Keys.Split names, the ones llama.cpp reads)
_SPLIT_COUNT_KEY = "split.count"
_SPLIT_NO_KEY = "split.no"
# a sharded checkpoint's index (HF save_pretrained): its ``weight_map`` maps each tensor to the shard file
# holding it, a name relative to the index's folder
_WEIGHT_MAP_KEY = "weight_map"
# The weight formats vLLM's default loader (DefaultModelLoader._prepare_weights, vLLM 0.32) loads from the
# folder it is pointed at — the model's own folder, never a subfolder (a glob, not recursive) — each as a
# file pattern and the index it reads there. --load-format auto is mistral where a consolidated*.safetensors
# exists, else the first of *.safetensors, *.bin, *.pt the folder has; --load-format names one
# (safetensors, mistral, npcache: *.bin, pt). A safetensors format reads its index when that is a file and
# refuses to start when it names a file its glob did not find ("Weight files referenced in index but
# missing"); without the index it loads every file of its pattern. *.bin and *.pt are loaded whole: vLLM
# never reads pytorch_model.bin.index.json, but it is the one list of the .bin shards the checkpoint needs
# (transformers reads it) — a shard it names that is missing fails vLLM's load all the same.
# How a safetensors format's index is read (filter_duplicate_safetensors_files, vLLM 0.32, run on small
# folders: fix 150): each ``weight_map`` value is joined to the folder as the engine was given it
# (os.path.join) and must be, as a string, one of the paths the format's glob found — so a name is
# accepted only as the name of a file directly in the folder, spelled as listed, matching the format's
# pattern and not hidden (glob's ``*`` skips a leading dot); ``./x``, ``x/../x``, ``sub/x``, ``x/``,
# ``sub\x`` (a backslash is a character of the name: accepted where a file is named so), an empty name,
# another case, a .bin in a safetensors index — refused, "Weight files referenced in index but missing";
# a value that is no text — a TypeError; an absolute path only where spelled as the folder the engine is
# given, which the pin does not see (refused here: fail closed). A tensor named twice keeps its last
# value (json.load), a shard named by many tensors is one shard.
_WEIGHT_FORMATS: tuple[tuple[str, str | None], ...] = (
    ("consolidated*.safetensors", "consolidated.safetensors.index.json"),  # mistral
    ("*.safetensors", "model.safetensors.index.json"),  # hf, safetensors (SAFE_WEIGHTS_INDEX_NAME)
    ("*.bin", "pytorch_model.bin.index.json"),  # hf without safetensors, npcache (WEIGHTS_INDEX_NAME)
    ("*.pt", None),  # pt, and hf's fall-back
)
# what vLLM leaves out of a *.bin / *.pt load (filter_files_not_needed_for_inference: a name ending so)
_NOT_WEIGHTS = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
# the indexes vLLM's loader reads itself (above: each name held to its format's glob, as written); the
# .bin index it never reads is held to the files its *.bin load takes — a name read as a path
# (``./x.bin`` is ``x.bin``), which must be one of the folder's own loaded .bin files
_INDEXES_READ = ("consolidated.safetensors.index.json", "model.safetensors.index.json")
# HF's shard naming (transformers' save_pretrained: ``model-00001-of-00003.safetensors``,
# ``pytorch_model-00001-of-00003.bin``): with no index, a shard's name is what says which set it is one of
_HF_SHARD = re.compile(r"^(?P<prefix>.+)-(?P<no>[0-9]{5})-of-(?P<count>[0-9]{5})\.(?P<ext>safetensors|bin)$")
# an index lists tensor names (a few MB for the largest models): anything far larger is no index
_INDEX_MAX_BYTES = 64 * 1024 * 1024


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
        try:
            rev = refs.read_text(encoding="utf-8", errors="replace").strip() if refs.is_file() else None
            snaps = sorted((p / "snapshots").iterdir())
        except OSError as e:
            raise InputError(f"cannot read the HF cache folder {p}: {e}") from e
        if rev is None and len(snaps) == 1:
            rev = snaps[0].name
        if rev is None:
            raise InputError(f"{p} holds several snapshots and no refs/main: name one snapshot directory")
        snap = p / "snapshots" / rev
        # refs/main must name one of this repo's snapshots, never a path that walks elsewhere
        if not _REVISION.match(rev) or rev in (".", "..") or snap.is_symlink() or not snap.is_dir():
            raise InputError(
                f"{refs if refs.is_file() else p} names revision {rev[:100]!r}, "
                f"which is not a snapshot folder of {p}"
            )
        return resolve_model(snap)
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


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _check_file(p: Path, rel: str, allowed: str, hf_blobs: str | None) -> FileCheck:
    """One listed file: where it really is, whether it may be read, and what its blob name promises.

    A symlink is followed only when it resolves inside ``allowed`` (the model folder, or for a HF cache
    snapshot the repo's own ``blobs/`` folder); anything else is a problem and is never read or stored.
    """
    target = p
    if p.is_symlink():
        try:
            real = os.path.realpath(p)
            link = os.readlink(p)
        except (OSError, RuntimeError, ValueError) as e:
            return FileCheck(rel, p, 0, None, problem=f"unreadable link: {e}")
        if not _inside(real, allowed):
            try:
                os.stat(p)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    return FileCheck(rel, p, 0, None, problem=f"link to {link[:200]!r} is a symlink loop")
            where = "the repo's blobs/ folder" if hf_blobs is not None else "the model folder"
            return FileCheck(
                rel, p, 0, None, problem=f"link to {link[:200]!r} points outside {where}; not read"
            )
        target = Path(real)
    try:
        st = target.stat()
    except FileNotFoundError:
        name = target.name if hf_blobs is not None else str(target)
        return FileCheck(rel, target, 0, None, problem=f"missing blob {name} (dangling link)")
    except (OSError, RuntimeError, ValueError) as e:  # a link loop (ELOOP), permissions …
        return FileCheck(rel, p, 0, None, problem=f"cannot read: {getattr(e, 'strerror', None) or e}")
    if not stat.S_ISREG(st.st_mode):
        return FileCheck(rel, target, 0, None, problem="not a regular file; not read")
    fc = FileCheck(rel, target, st.st_size, None)
    if hf_blobs is not None and p.is_symlink():
        blob = target.name
        if blob.endswith(".incomplete"):
            fc.problem = f"blob {blob} is an unfinished download"
        elif _SHA256.match(blob):
            fc.lfs, fc.expected = True, blob
        elif _SHA1.match(blob):
            fc.expected = blob
        else:
            fc.problem = f"blob name {blob!r} is not a SHA-256 or git SHA-1"
    return fc


def _dir_link_problem(p: Path, allowed: str, chain: frozenset[str], hf: bool) -> str | None:
    """None to walk into ``p``; otherwise why a linked directory is not read.

    A directory link is followed only when it resolves inside ``allowed`` and not to a folder on the way
    down to it (``chain``: that would be a loop); its files are then pinned under the link's path, as
    the engine sees them. A link elsewhere is reported, like a file link, and never read.
    """
    if not p.is_symlink():
        return None
    try:
        link = os.readlink(p)
        real = os.path.realpath(p)
    except (OSError, RuntimeError, ValueError) as e:
        return f"unreadable link: {e}"
    where = "the repo's blobs/ folder" if hf else "the model folder"
    if not _inside(real, allowed):
        return f"directory link to {link[:200]!r} points outside {where}; not read"
    if real in chain:
        return f"directory link to {link[:200]!r} leads back to a folder above it (a loop); not read"
    return None


def _gguf_split_keys(path: Path) -> tuple[int | None, int | None, str | None]:
    """``split.count`` and ``split.no`` of a GGUF file's header, read with the gguf library (None for a
    key it lacks, and for both where the file is not a GGUF), and why the file cannot be loaded: a header
    that cannot be read, or tensor data cut short (``_gguf_data_cut``: the file ends before the last byte
    its header places a tensor's data at — an interrupted download, a copy cut short)."""
    try:
        with path.open("rb") as f:
            magic = f.read(len(_GGUF_MAGIC))
    except OSError as e:
        return None, None, f"cannot read: {e.strerror or e}"
    if magic != _GGUF_MAGIC:
        return None, None, None
    values: list[int | None] = []
    try:
        reader, ends = _gguf_header(path)
        for key in (_SPLIT_COUNT_KEY, _SPLIT_NO_KEY):
            field = reader.get_field(key)
            value = None if field is None else field.contents()
            if value is not None and (type(value) is not int or value < 0):
                return None, None, f"its GGUF header's {key} is {value!r}, not a count"
            values.append(value)
        size = int(reader.data.size)
    except Exception as e:  # a malformed header: the parser's own error, whatever its type
        return None, None, f"cannot read its GGUF header: {type(e).__name__}: {str(e)[:200]}"
    return values[0], values[1], _gguf_data_cut(size, ends)


def _gguf_header(path: Path) -> tuple[Any, list[tuple[str, int]]]:
    """A GGUF file's header, read with the gguf library, and where its header places each tensor's data:
    (tensor name, the byte its data ends at), in header order. The tensors' data is not mapped — the
    library's reader maps each tensor as a numpy array, and on a file cut short in its tensor data fails
    with numpy's error ("cannot reshape array …"), which names neither the file's size nor the header's."""
    import gguf

    ends: list[tuple[str, int]] = []

    class _HeaderReader(gguf.GGUFReader):
        def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
            seen: set[bytes] = set()
            for fld in fields:
                _, name, _, dims, raw_type, offset = fld.parts
                label = bytes(name).decode("utf-8", "replace")[:200]
                if bytes(name) in seen:  # as the library's own reader refuses it
                    raise ValueError(f"Found duplicated tensor with name {label}")
                seen.add(bytes(name))
                block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(int(raw_type[0]))]
                n = 1
                for d in dims.tolist():
                    n *= int(d)
                ends.append((label, int(start_offs) + int(offset[0]) + n * type_size // block))

    return _HeaderReader(path, "r"), ends


def _gguf_data_cut(size: int, ends: list[tuple[str, int]]) -> str | None:
    """Why a GGUF file of ``size`` bytes is cut short in its tensor data, where its header (``ends``: each
    tensor's name and the byte its data ends at) places data past its end; None where it holds it all."""
    if not ends:
        return None
    name, need = max(ends, key=lambda e: e[1])
    if size >= need:
        return None
    return (
        f"its tensor data is cut short: the file ends at byte {size}, its GGUF header needs {need} "
        f"(tensor {name!r} ends there; {need - size} bytes missing — a download or copy cut short)"
    )


def gguf_split_set(path: Path) -> tuple[list[Path], list[str]]:
    """The files llama.cpp loads for the model file ``path``, and what makes that set not one it would
    load whole. A file that is one split of a set — named ``PREFIX-NNNNN-of-MMMMM.gguf`` (llama.cpp's split
    naming) or with ``split.count`` above 1 in its GGUF header — is loaded with every split of the set,
    each found beside it by that naming: all of them are listed, ``path`` first. Fail closed: a name and a
    header that disagree on the count, a header split count under a name llama.cpp cannot derive the
    others from, a file that is not the set's first split, or an unreadable header is a problem; a split
    that is missing is for the caller to find (it is listed all the same)."""
    key_count, key_no, unreadable = _gguf_split_keys(path)
    m = _GGUF_SPLIT.match(path.name)
    problems = [unreadable] if unreadable else []
    if m is None:
        if key_count is not None and key_count > 1:
            problems.append(
                f"its GGUF header says it is one of {_SPLIT_COUNT_KEY} = {key_count} splits, but its name is "
                f"not llama.cpp's split naming (PREFIX-00001-of-{key_count:05d}.gguf): the other splits "
                "cannot be found"
            )
        return [path], problems
    no, count = int(m["no"]), int(m["count"])
    if key_count is not None and key_count != count:
        problems.append(f"its name says {count} splits, its GGUF header {_SPLIT_COUNT_KEY} = {key_count}")
    if count < 1 or not 1 <= no <= count:
        problems.append(f"its name says split {no} of {count}: not a split of a set")
        return [path], problems
    if count > 1 and no != 1:
        problems.append(
            f"it is split {no} of {count}: llama.cpp loads a split set from its first split "
            f"({m['prefix']}-00001-of-{count:05d}.gguf)"
        )
    if key_no is not None and key_count is not None and key_count > 1 and key_no != no - 1:
        problems.append(f"its name says split {no}, its GGUF header {_SPLIT_NO_KEY} = {key_no} (from 0)")
    siblings = [path.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    return [path, *(s for s in siblings if s.name != path.name)], problems


def _model_file(p: Path, problem: str | None = None, missing: str = "missing") -> FileCheck:
    """One file a model location names directly (the model file, a split beside it), a link followed."""
    try:
        st = p.stat()
    except FileNotFoundError:
        return FileCheck(p.name, p, 0, None, problem=missing)
    except (OSError, RuntimeError, ValueError) as e:
        return FileCheck(p.name, p, 0, None, problem=f"cannot read: {getattr(e, 'strerror', None) or e}")
    if not stat.S_ISREG(st.st_mode):
        return FileCheck(p.name, p, 0, None, problem="not a regular file; not read")
    return FileCheck(p.name, p, st.st_size, None, problem=problem)


def _weight_map_files(f: FileCheck, pattern: str) -> tuple[list[str], str | None]:
    """The file names the weight index ``f`` maps tensors to (each once, in order of first mention), or why
    it is no index that can be read: not JSON, no ``weight_map`` object, an empty one, a value that is not a
    file name, a name outside the folder (absolute, or with a ``..`` part: never looked up), or a name the
    engine's loader does not take for a shard of the format (``pattern``) it loads from the folder: for an
    index vLLM reads (``_INDEXES_READ``), anything but the name of a file directly in the folder as its glob
    lists it (``./x``, ``sub/x``, a hidden name, one the pattern does not match — vLLM refuses to start);
    for the .bin index, a name that is not, as a path, one of the folder's own .bin files vLLM loads."""
    try:
        with f.path.open("rb") as fh:
            data = fh.read(_INDEX_MAX_BYTES + 1)
    except OSError as e:
        return [], f"cannot read this weight index: {e.strerror or e}"
    if len(data) > _INDEX_MAX_BYTES:
        return [], f"a weight index over {_INDEX_MAX_BYTES // (1024 * 1024)} MiB: not read as one"
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return [], f"not a weight index: not JSON ({str(e)[:200]})"
    wm = doc.get(_WEIGHT_MAP_KEY) if isinstance(doc, dict) else None
    if not isinstance(wm, dict):
        return [], f"not a weight index: no {_WEIGHT_MAP_KEY} object naming the shard of each tensor"
    if not wm:
        return [], f"a weight index whose {_WEIGHT_MAP_KEY} names no shard"
    read = f.rel in _INDEXES_READ
    names: dict[str, None] = {}
    for tensor, value in wm.items():
        if not isinstance(value, str) or not value or "\x00" in value:
            return [], (
                f"its {_WEIGHT_MAP_KEY} gives tensor {tensor[:200]!r} the shard {value!r:.200}, "
                "not a file name"
            )
        if value.startswith("/") or ".." in PurePosixPath(value).parts:
            return [], (
                f"its {_WEIGHT_MAP_KEY} names the shard {value[:200]!r}, outside the model folder "
                "(an absolute path or one with '..'); not looked up"
            )
        name = value if read else PurePosixPath(value).as_posix()
        loaded = (
            "/" not in name
            and not name.startswith(".")
            and fnmatchcase(name, pattern)
            and (read or not name.endswith(_NOT_WEIGHTS))
        )
        if not loaded:
            how = (
                "vLLM's loader takes only the name of a file directly in the model folder, as its glob "
                "lists it — it refuses to start"
                if read
                else "vLLM loads only the folder's own .bin files, less those of training (optimizer.bin, …)"
            )
            return [], (
                f"its {_WEIGHT_MAP_KEY} names the shard {value[:200]!r}, not the name of a {pattern} file "
                f"the engine loads from the model folder ({how})"
            )
        names.setdefault(name)
    return list(names), None


def _weight_formats(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """The weight formats (``_WEIGHT_FORMATS``) the model's own folder holds files of, given the names of
    the files directly in it (as vLLM's glob sees them: no hidden name, none it leaves out of a load): each
    one the engine could load. The pin does not see the engine's command (its --load-format), so each of
    them is read — fail closed — not only the one --load-format auto would pick."""
    loadable = [n for n in names if not n.startswith(".") and not n.endswith(_NOT_WEIGHTS)]
    return [
        (pattern, index)
        for pattern, index in _WEIGHT_FORMATS
        if any(fnmatchcase(n, pattern) for n in loadable)
    ]


def check_weight_indexes(checks: list[FileCheck], root: Path) -> list[FileCheck]:
    """Every shard the engine would load from the folder ``checks`` lists must be a file of the listing, as
    vLLM loads it (``_WEIGHT_FORMATS``): in the model's own folder only, for each weight format whose files
    it holds (``_weight_formats``), the format's index is read — each file its ``weight_map`` names must be
    a file of the listing, named as vLLM's loader takes a name (``_weight_map_files``: ``./x``, ``sub/x``, a
    hidden name refused) (vLLM refuses to start, "Weight files referenced in index but missing") — and,
    where the folder has no such index, each shard of a set named by HF's shard naming
    (``…-00001-of-00003.safetensors``) must be there (the engine loads every file of the format and needs
    the whole set). A folder that holds no weight file of any format has every index of it read: there is
    nothing else the engine could load. An index the engine does not read — one in a subfolder (an adapter,
    ``original/``), one of another name, or the index of a format the folder holds no file of (the
    ``pytorch_model.bin.index.json`` that comes with a download of a repo's safetensors) — is not read and
    fails nothing. An index read that cannot be read as one gets that as its problem; each file the listing
    lacks is returned as a file of its own with its problem (missing, or not a file the pin lists), as a
    missing GGUF split is. An index that already has a problem (a link outside the folder, a blob that is
    not its name) is not read."""
    listed = {c.rel for c in checks}
    top = [c.rel for c in checks if "/" not in c.rel]
    formats = _weight_formats(top)
    indexes = {index: pattern for pattern, index in (formats or _WEIGHT_FORMATS) if index is not None}
    wanted: dict[str, list[str]] = {}
    for c in checks:
        if c.rel not in indexes or c.problem is not None:
            continue
        names, problem = _weight_map_files(c, indexes[c.rel])
        if problem is not None:
            c.problem = problem
            continue
        for name in names:
            wanted.setdefault(name, []).append(c.rel)
    # a format without its index is loaded whole: a set its shards' names give must be whole
    in_set: dict[str, tuple[str, int, str | None]] = {}
    for pattern, index in formats:
        if index in listed:
            continue
        for name in top:
            m = _HF_SHARD.match(name)
            if m is None or not fnmatchcase(name, pattern) or name.startswith("."):
                continue
            no, count = int(m["no"]), int(m["count"])
            if not 1 <= no <= count:
                continue
            for i in range(1, count + 1):
                rel = f"{m['prefix']}-{i:05d}-of-{count:05d}.{m['ext']}"
                in_set.setdefault(rel, (name, count, index))
    out = []
    for rel in sorted((wanted.keys() | in_set.keys()) - listed):
        p = root / rel
        if rel in wanted:
            by = " and ".join(wanted[rel])
            named = f"named in the {_WEIGHT_MAP_KEY} of {by}"
            missing = f"missing: {by} names it in its {_WEIGHT_MAP_KEY} (the engine loads every shard named)"
        else:
            shard, count, index = in_set[rel]
            named = f"one of the {count} shards of the set of {shard} (by its name)"
            missing = (
                f"missing: {shard} is one of {count} shards by its name and the folder has no {index} "
                "(the engine loads every shard of the set)"
            )
        problem = f"{named}, but not a file the pin lists; not read" if os.path.lexists(p) else missing
        out.append(FileCheck(rel, p, 0, None, problem=problem))
    return out


@dataclass(frozen=True)
class ModelListing:
    """What a pin lists of a model location: its files (``list_files``) and every folder walked to find
    them — the root and each folder under it the walk went into, as the engine sees it (a followed link by
    its own path), none it skips (``.git``, ``.cache``, ``__pycache__``, a link not followed), and none
    for a model named by one file. A folder's own identity moves when an entry is added to it or removed
    from it, so a file that came and went between two listings still shows there."""

    files: list[FileCheck]
    folders: list[Path]


def list_files(src: ModelSource) -> list[FileCheck]:
    """The files of a model location that a pin hashes, as ``scan_model`` lists them (links checked): every
    file under a folder, and every shard the engine would load from it that the folder lacks, listed missing
    (``check_weight_indexes``); for one file, the file and, where it is one split of a GGUF split set, every
    split of the set (``gguf_split_set``) — the one listing the pin hashes and the end-of-job check lists
    again."""
    return list_model(src).files


def list_model(src: ModelSource) -> ModelListing:
    """``list_files`` and the folders its walk went into (``ModelListing``), from one walk."""
    if not src.root.is_dir():
        paths, problems = gguf_split_set(src.root)
        first = _model_file(src.root, "; ".join(problems) or None)
        count = len(paths)
        return ModelListing(
            [
                first,
                *(
                    _model_file(
                        p, missing=f"missing split of {count}: llama.cpp loads every split of the set"
                    )
                    for p in paths[1:]
                ),
            ],
            [],
        )
    root = os.path.realpath(src.root)
    hf_blobs: str | None = None
    allowed = root
    if src.layout == "hf-cache":
        # …/models--org--name/snapshots/<rev>: links may only lead into …/models--org--name/blobs
        hf_blobs = os.path.join(os.path.realpath(src.root.parent.parent), "blobs")
        allowed = hf_blobs
    checks: list[FileCheck] = []
    folders: list[Path] = []
    # the real folders from the root down to each folder walked: a link back to one of them is a loop
    chains: dict[str, frozenset[str]] = {str(src.root): frozenset({root})}
    for dirpath, dirnames, filenames in os.walk(src.root, followlinks=True):
        chain = chains.pop(dirpath, frozenset())
        folders.append(Path(dirpath))
        keep = []
        for d in sorted(dirnames):
            if d in (".git", ".cache", "__pycache__"):
                continue
            sub = Path(dirpath) / d
            problem = _dir_link_problem(sub, allowed, chain, hf_blobs is not None)
            if problem is None:
                keep.append(d)
                chains[str(sub)] = chain | {os.path.realpath(sub)}
            else:
                checks.append(FileCheck(sub.relative_to(src.root).as_posix(), sub, 0, None, problem=problem))
        dirnames[:] = keep
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(src.root).as_posix()
            if src.layout == "directory" and name.startswith(".ledger-"):
                continue
            if hf_blobs is not None and not p.is_symlink():
                # a plain file copied into a snapshot: read where it lies, inside the snapshot
                checks.append(_check_file(p, rel, root, None))
            else:
                checks.append(_check_file(p, rel, allowed, hf_blobs))
    checks += check_weight_indexes(checks, src.root)
    return ModelListing(checks, folders)


def scan_model(
    src: ModelSource,
    *,
    workers: int | None = None,
    progress: Callable[[int], object] | None = None,
    on_total: Callable[[int, int], object] | None = None,
) -> ModelScan:
    """Hash every file (files in parallel, BLAKE3 and SHA-256 in one read) and verify HF blob names."""
    checks = list_files(src)
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
    if not (revision or scan.source.revision):
        # No hub revision (a local directory or file): the content itself is the immutable revision.
        listing = sorted((f["path"], f["size"], f["sha256"]) for f in files)
        revision = "blake3:" + blake3_hex(canonical_bytes(listing))
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
