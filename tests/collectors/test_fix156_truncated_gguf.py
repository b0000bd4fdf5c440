"""Fix 156 (audit 102 f6, issue 11): a GGUF cut short in its tensor data (an interrupted download) failed the
pin, as it must (PREREQUISITES), but said "cannot read its GGUF header: ValueError: cannot reshape array …" —
the gguf library's reader maps every tensor as a numpy array and fails with numpy's words. The header is
whole; the data is short. The pin now names the truncation: the byte the file ends at, the byte its header
needs (the end of the tensor whose data lies last), and how many bytes are missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ledger.collectors.model import gguf_split_set, resolve_model, scan_model

from .test_fix76_pin_covers_what_loads import _write_gguf

CUT = re.compile(
    r"^its tensor data is cut short: the file ends at byte (?P<size>\d+), "
    r"its GGUF header needs (?P<need>\d+) \(tensor 't(?P<tensor>\d)' ends there; "
    r"(?P<missing>\d+) bytes missing"
)


@pytest.fixture
def whole(tmp_path: Path) -> bytes:
    f = tmp_path / "w.gguf"
    _write_gguf(f, tensors=3)
    return f.read_bytes()


def _problems(tmp_path: Path, data: bytes, name: str = "m.gguf") -> list[str]:
    f = tmp_path / name
    f.write_bytes(data)
    return gguf_split_set(f)[1]


def test_a_gguf_cut_in_its_tensor_data_names_the_truncation(tmp_path: Path, whole: bytes) -> None:
    cut = whole[: len(whole) - 40]  # the last tensor (16 float32: 64 bytes) cut short
    problems = _problems(tmp_path, cut)
    assert len(problems) == 1, problems
    m = CUT.match(problems[0])
    assert m is not None, problems
    assert (int(m["size"]), int(m["need"]), m["tensor"], int(m["missing"])) == (len(cut), len(whole), "2", 40)
    assert "reshape" not in problems[0] and "cannot read its GGUF header" not in problems[0]


def test_the_pin_fails_naming_the_truncation(tmp_path: Path, whole: bytes) -> None:
    f = tmp_path / "truncated.gguf"
    f.write_bytes(whole[: len(whole) * 2 // 3])
    failures = scan_model(resolve_model(f)).failures
    assert len(failures) == 1 and failures[0].startswith("truncated.gguf: its tensor data is cut short"), (
        failures
    )


@pytest.mark.parametrize("short", [1, 64, 128], ids=["one-byte", "one-tensor", "two-tensors"])
def test_every_cut_within_the_tensor_data_is_named(tmp_path: Path, whole: bytes, short: int) -> None:
    m = CUT.match(_problems(tmp_path, whole[: len(whole) - short])[0])
    assert m is not None and int(m["missing"]) == short and int(m["need"]) == len(whole)


def test_a_whole_gguf_has_no_problem(tmp_path: Path, whole: bytes) -> None:
    assert _problems(tmp_path, whole) == []


def test_bytes_after_the_last_tensor_are_no_truncation(tmp_path: Path, whole: bytes) -> None:
    assert _problems(tmp_path, whole + b"\0" * 32) == []


def test_a_gguf_cut_in_its_header_still_says_the_header_cannot_be_read(tmp_path: Path, whole: bytes) -> None:
    problems = _problems(tmp_path, whole[:40])
    assert len(problems) == 1 and problems[0].startswith("cannot read its GGUF header: "), problems


def test_a_split_of_a_set_cut_short_is_named_too(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    _write_gguf(d / "tt.gguf", split_max_tensors=1)
    first = d / "tt-00001-of-00002.gguf"
    data = first.read_bytes()
    first.write_bytes(data[:-8])
    paths, problems = gguf_split_set(first)
    assert len(paths) == 2  # the set is still listed whole
    assert len(problems) == 1 and CUT.match(problems[0]) is not None, problems


def test_a_duplicated_tensor_name_is_still_refused(tmp_path: Path, whole: bytes) -> None:
    """The header is read without mapping the data, and still as the library reads it: a second tensor of
    one name (t1 renamed t0, one byte) is a header that cannot be read."""
    at = whole.index(b"t1")
    problems = _problems(tmp_path, whole[:at] + b"t0" + whole[at + 2 :])
    assert len(problems) == 1 and "duplicated tensor with name t0" in problems[0], problems
