"""Path traversal and symlink tricks: digests, artifact names and artifact paths.

Decisions: a digest is only ever `blake3:<64 lowercase hex>` (anything else is refused before a path is
built); an artifact name is a label stored in the entry and never used as a path; an artifact path may be a
symlink to a regular file (Hugging Face snapshots are symlinks into blobs/), which is followed and stored
by content; a FIFO, a directory, a device, a dangling or looping symlink is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TRICKY_DIGESTS = [
    "blake3:../../etc/passwd",
    "blake3:../" + "0" * 61,
    "blake3:" + "A" * 64,
    "blake3:" + "0" * 63,
    "blake3:" + "0" * 65,
    "blake3:" + "0" * 62 + "/x",
    "blake3:" + "0" * 32 + "\x00" + "0" * 31,
    "sha256:" + "0" * 64,
    "/etc/passwd",
    "objects/00/" + "0" * 64,
    "blake3:%2e%2e%2f" + "0" * 55,
]


@pytest.fixture
def ready(cli, home: Path):  # type: ignore[no-untyped-def]
    assert cli("init").code == 0
    assert cli("keys", "new", "hostA", "--role", "collector").code == 0
    return cli


def _refused(r, code: str) -> None:  # type: ignore[no-untyped-def]
    assert r.code == 2, (r.out, r.err)
    assert r.err.startswith(f"error[{code}]"), r.err
    assert len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("digest", TRICKY_DIGESTS)
def test_tricky_digest_refused_by_cat(ready, digest: str) -> None:  # type: ignore[no-untyped-def]
    r = ready("cat", digest)
    _refused(r, "bad-input")
    assert r.out == ""


@pytest.mark.parametrize("digest", TRICKY_DIGESTS)
def test_tricky_digest_refused_as_artifact(ready, digest: str) -> None:  # type: ignore[no-untyped-def]
    r = ready(
        "record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "x"}',
        "--artifact", f"log={digest}",
    )  # fmt: skip
    # "log=/etc/passwd" is a path, not a digest: it is stored as a file (the operator may read it).
    if digest.startswith("/"):
        return
    assert r.code == 2, (r.out, r.err)
    assert r.err.startswith(("error[bad-input]", "error[schema-violation]")), r.err
    assert ready("verify", "--json").json()["size"] == 2


def test_traversal_in_artifact_name_is_only_a_label(ready, home: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "stderr.log"
    src.write_text("engine died\n")
    name = "../../../../tmp/evil-" + os.urandom(4).hex()
    r = ready(
        "record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "x"}',
        "--artifact", f"{name}={src}", "--json",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert r.json()["artifacts"][0]["name"] == name
    assert not Path("/tmp", name.rsplit("/", 1)[1]).exists()
    stored = [p for p in (home / "store" / "objects").rglob("*") if p.is_file()]
    assert [p.name for p in stored] == [r.json()["artifacts"][0]["digest"].removeprefix("blake3:")]


def test_symlink_to_regular_file_is_followed_and_stored_by_content(ready, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    blob.write_bytes(b"safetensors bytes")
    link = tmp_path / "snapshot" / "model.safetensors"
    link.parent.mkdir()
    link.symlink_to(blob)
    r = ready("put", str(link), "--json")
    assert r.code == 0, r.err
    digest = r.json()["items"][0]["digest"]
    assert ready("cat", digest).out == "safetensors bytes"


def _special_paths(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    to_zero = tmp_path / "to-zero"
    to_zero.symlink_to("/dev/zero")
    to_fifo = tmp_path / "to-fifo"
    to_fifo.symlink_to(fifo)
    (tmp_path / "dir").mkdir()
    return {
        "fifo": fifo,
        "directory": tmp_path / "dir",
        "char-device": Path("/dev/zero"),
        "symlink-to-device": to_zero,
        "symlink-to-fifo": to_fifo,
        "symlink-loop": loop,
        "dangling-symlink": dangling,
        "missing": tmp_path / "missing",
    }


SPECIALS = [
    "fifo",
    "directory",
    "char-device",
    "symlink-to-device",
    "symlink-to-fifo",
    "symlink-loop",
    "dangling-symlink",
    "missing",
]


@pytest.mark.parametrize("what", SPECIALS)
@pytest.mark.parametrize("how", ["put", "artifact", "by-reference"])
def test_non_regular_artifact_path_refused(ready, tmp_path: Path, what: str, how: str) -> None:  # type: ignore[no-untyped-def]
    """A FIFO would block forever, /dev/zero would never end, a directory is not one artifact: refused."""
    path = _special_paths(tmp_path)[what]
    if how == "put":
        r = ready("put", str(path))
    else:
        flag = "--artifact" if how == "artifact" else "--by-reference"
        r = ready(
            "record", "note", "--key", "hostA", "-s", "campaign=c", "--data", '{"text": "x"}',
            flag, f"log={path}",
        )  # fmt: skip
    _refused(r, "bad-input")
    assert "not a readable file" in r.err
    assert ready("verify", "--json").json()["size"] == 2
