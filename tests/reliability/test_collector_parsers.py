"""Hostile input to the collectors' parsers: kernel logs, engine log phases and failure signatures,
campaign and signature TOML, Hugging Face cache layouts. No crash other than the ledger's typed errors,
and whatever a parser returns can be signed (it validates against its payload model).
"""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.collectors.campaign import load_campaign
from ledger.collectors.kernel import parse_kernel_log, parse_since
from ledger.collectors.model import resolve_model, scan_model
from ledger.collectors.phases import parse_phases
from ledger.entries import KernelEvent
from ledger.errors import LedgerError
from ledger.gpu_faults import classify_events, load_catalogue
from ledger.signatures import RunOutcome, classify, load_signatures

REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
ENGINE_LOGS = sorted((REPO / "tests" / "fixtures" / "engine_logs").glob("*.log"))
CAMPAIGNS = sorted((REPO / "campaigns").glob("*.toml"))
SIGNATURES = load_signatures()
CATALOGUE = load_catalogue()

kernel_prefixes = st.sampled_from(
    ["", "[ 12.345678] ", "[999999.0] ", "2026-09-09T09:01:15+0000 ", "2026-13-45T99:99:99Z ",
     "2026-09-09T09:01:15,123456+05:30 "]
)  # fmt: skip
kernel_bodies = st.sampled_from(
    ["NVRM: Xid (PCI:0000:01:00): 79, pid=1234", "NVRM: Xid (PCI:0000:01:00): " + "9" * 40,
     "amdgpu 0000:03:00.0: amdgpu: ring gfx_0.0.0 timeout", "amdgpu: GPU reset begin!",
     "amdgpu: GPU reset succeeded", "amdgpu: VRAM is lost due to GPU reset!", "MES failed to response",
     "nvidia-modeset: ERROR", "\x00\x1b[31mNVRM\u2028", "",
     "Out of memory: Killed process 1234 (python3) total-vm:1kB",
     "Memory cgroup out of memory: Killed process 1 ()",
     "oom-kill:task=,pid=" + "9" * 40 + ",constraint=CONSTRAINT_MEMCG,oom_memcg=",
     "py invoked oom-killer: gfp_mask=0", "oom_reaper: reaped process 77 (a) b), now anon-rss:0kB"]
)  # fmt: skip
kernel_lines = st.lists(st.tuples(kernel_prefixes, kernel_bodies, st.text(max_size=20)), max_size=8).map(
    lambda ls: "\n".join(p + b + t for p, b, t in ls)
)


@FUZZ
@given(kernel_lines | st.text(max_size=400), st.sampled_from([None, datetime(2026, 9, 9, tzinfo=UTC)]))
def test_kernel_log_parser_returns_signable_events(text: str, boot: datetime | None) -> None:
    try:
        events = parse_kernel_log(text, boot_time=boot)
    except LedgerError:
        return
    for ev in events:
        KernelEvent.model_validate(ev)
    # the policy engine's reading of the same lines (class, and an OOM kill's process and pid) never fails
    for fact in classify_events(events, CATALOGUE):
        assert fact["pid"] is None or type(fact["pid"]) is int


@pytest.mark.parametrize(
    "line",
    [
        "[99999999999999999999.0] NVRM: Xid (PCI:0000:01:00): 79",
        "NVRM: Xid (PCI:0000:01:00): " + "9" * 5000,
    ],
)
def test_kernel_log_pathological_stamps(line: str) -> None:
    try:
        events = parse_kernel_log(line, boot_time=datetime(2026, 9, 9, tzinfo=UTC))
    except LedgerError:
        return
    for ev in events:
        KernelEvent.model_validate(ev)


@FUZZ
@given(st.text(max_size=60))
def test_kernel_since_parser(text: str) -> None:
    with contextlib.suppress(LedgerError):
        parse_since(text)


engine_lines = st.lists(
    st.sampled_from([line for p in ENGINE_LOGS for line in p.read_text(errors="replace").splitlines()[:400]])
    | st.text(max_size=80),
    max_size=30,
)


@FUZZ
@given(engine_lines)
def test_engine_log_phases_are_numbers(lines: list[str]) -> None:
    phases = parse_phases(lines)
    assert all(isinstance(k, str) and isinstance(v, float | int) for k, v in phases.items())


@FUZZ
@given(
    engine_lines.map("\n".join),
    st.booleans(),
    st.none() | st.integers(-300, 300),
    st.none() | st.integers(1, 64),
    st.booleans(),
)
def test_failure_signatures_classify_anything(
    text: str, ready: bool, code: int | None, sig: int | None, lease: bool
) -> None:
    c = classify(text, RunOutcome(ready, code, sig, lease), SIGNATURES)
    assert c.signature is None or c.signature in {s.id for s in SIGNATURES}
    assert c.detail is None or len(c.detail) <= 500


toml_text = st.text(alphabet='[]{}=".,#\n abcdefgijklmnoprstuvwxyz0123456789_-\\', max_size=300)


def _edits(base: str) -> st.SearchStrategy[str]:
    return st.tuples(st.integers(0, len(base)), st.integers(0, 40), toml_text).map(
        lambda t: base[: t[0]] + t[2] + base[t[0] + t[1] :]
    )


@FUZZ
@given(st.data())
def test_campaign_toml_raises_only_config_errors(tmp_path: Path, data: st.DataObject) -> None:
    bases = [p.read_text() for p in CAMPAIGNS]
    text = data.draw(toml_text | st.sampled_from(bases).flatmap(_edits))
    p = tmp_path / "campaign.toml"
    p.write_text(text)
    with contextlib.suppress(LedgerError):
        load_campaign(p)


@FUZZ
@given(st.data())
def test_signature_toml_raises_only_config_errors(tmp_path: Path, data: st.DataObject) -> None:
    base = (REPO / "collectors" / "signatures.toml").read_text()
    text = data.draw(toml_text | _edits(base))
    p = tmp_path / "signatures.toml"
    p.write_text(text)
    with contextlib.suppress(LedgerError):
        load_signatures(p)


@pytest.mark.parametrize(
    "depth",
    [
        200,
        5000,
    ],
)
def test_deeply_nested_campaign_toml_is_a_config_error(tmp_path: Path, depth: int) -> None:
    p = tmp_path / "deep.toml"
    p.write_text("x = " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(LedgerError):
        load_campaign(p)


# --- Hugging Face cache layouts ---------------------------------------------------------------------------


def _hf_repo(root: Path) -> Path:
    repo = root / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    return repo


def test_hostile_hf_cache_layout_is_scanned_without_crashing(tmp_path: Path) -> None:
    repo = _hf_repo(tmp_path)
    snap = repo / "snapshots" / "abc123"
    (repo / "blobs" / "not-a-hash").write_bytes(b"x")
    (repo / "blobs" / ("a" * 64 + ".incomplete")).write_bytes(b"partial")
    (repo / "blobs" / ("b" * 64)).write_bytes(b"wrong content for its sha256 name")
    (snap / "weird.bin").symlink_to("../../blobs/not-a-hash")
    (snap / "partial.safetensors").symlink_to("../../blobs/" + "a" * 64 + ".incomplete")
    (snap / "corrupt.safetensors").symlink_to("../../blobs/" + "b" * 64)
    (snap / "dangling.json").symlink_to("../../blobs/" + "c" * 64)
    (snap / "sub").mkdir()
    (snap / "sub" / "dirlink").symlink_to("..")
    scan = scan_model(resolve_model(repo))
    problems = {f.rel: f.problem for f in scan.files}
    assert problems["corrupt.safetensors"] and "does not match" in problems["corrupt.safetensors"]
    assert problems["partial.safetensors"] and "unfinished" in problems["partial.safetensors"]
    assert problems["dangling.json"] and "dangling" in problems["dangling.json"]
    assert problems["weird.bin"]
    assert scan.failures


def test_symlink_loop_in_model_folder_is_a_problem(tmp_path: Path) -> None:
    repo = _hf_repo(tmp_path)
    (repo / "snapshots" / "abc123" / "loop").symlink_to("loop")
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    try:
        scan = scan_model(resolve_model(repo))
    except LedgerError:
        return
    assert {f.rel: f.problem for f in scan.files}["loop"]


def test_refs_main_traversal_is_refused(tmp_path: Path) -> None:
    repo = _hf_repo(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not part of any model")
    (repo / "refs" / "main").write_text("../../outside")

    def scan() -> None:
        scan_model(resolve_model(repo))

    with pytest.raises(LedgerError):
        scan()


def test_symlink_escaping_model_folder_is_a_problem(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    secret = tmp_path / "secret"
    secret.write_text("password=hunter2")
    (model / "tokenizer.json").symlink_to(secret)
    scan = scan_model(resolve_model(model))
    problems = {f.rel: f.problem for f in scan.files}
    assert problems["tokenizer.json"], problems
    escaped = next(f for f in scan.files if f.rel == "tokenizer.json")
    assert escaped.digests is None  # never read, so never stored with --store
    assert scan.verification == "failed"
