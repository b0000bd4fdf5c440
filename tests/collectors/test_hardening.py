"""Regression tests for collector defects found by the reliability suite: secret redaction, hostile kernel
lines, deeply nested TOML, and model folders whose links lead elsewhere."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledger.collectors.campaign import load_campaign
from ledger.collectors.kernel import parse_kernel_log, parse_since
from ledger.collectors.model import resolve_model, scan_model
from ledger.collectors.secrets import (
    REDACTED,
    Redactor,
    is_secret_name,
    redact_command,
    redact_env,
    scrub_text,
)
from ledger.errors import ConfigError, InputError, LedgerError
from ledger.service import Ledger
from ledger.signatures import load_signatures

from .conftest import run_ledger

# --- secrets: names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "UPSTREAM_BEARER",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "OPENAI_API_KEY",
        "OPENAI_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "DB_PASSWD",
        "DB_PASS",
        "MYSQL_PWD",
        "OAUTH_CLIENT_SECRET",
        "HTTP_AUTH",
        "AUTHORIZATION",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SESSION_COOKIE",
        "SESSION",
        "SENTRY_DSN",
        "--api-key",
        "--hf-token",
        "--password",
        "service.jwt",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "TOKENIZERS_PARALLELISM",
        "MAX_TOKENS",
        "--max-num-batched-tokens",
        "--tokenizer",
        "--skip-tokenizer-init",
        "--session-len",
        "PWD",
        "OLDPWD",
        "AUTHOR",
        "KEYBOARD",
        "PASSPORT",
        "CUDA_VISIBLE_DEVICES",
        "LD_LIBRARY_PATH",
    ],
)
def test_ordinary_names_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


# --- secrets: env and command lines ----------------------------------------------------------------------


def test_bearer_named_variable_is_redacted_in_env() -> None:
    env = redact_env(
        {"UPSTREAM_BEARER": "eyJhbGciOi.payload.sig", "EXTRA": "Authorization: Bearer abcdefgh12"}
    )
    assert env["UPSTREAM_BEARER"] == REDACTED
    assert "abcdefgh12" not in env["EXTRA"]


def test_engine_flags_are_not_over_redacted() -> None:
    cmd = [
        "vllm", "serve", "m", "--max-num-batched-tokens", "8192", "--tokenizer", "/models/t",
        "--session-len", "4096", "--no-auth", "--port", "8000", "--token=", "--api-key", "k-123456",
    ]  # fmt: skip
    out = redact_command(cmd)
    assert out[:12] == cmd[:12], out  # numbers, paths and the flag after a value-less --no-auth survive
    assert out[12] == "--token="
    assert out[13:] == ["--api-key", REDACTED]


def test_header_and_url_credentials_in_arguments_are_redacted() -> None:
    out = redact_command(
        ["x", "--header", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "https://u:pw-secret@h.example/x"]
    )
    assert "dXNlcjpwYXNzd29yZA==" not in " ".join(out)
    assert "pw-secret" not in " ".join(out)
    assert out[3] == f"https://u:{REDACTED}@h.example/x"


# --- secrets: stored logs --------------------------------------------------------------------------------


def test_env_dump_in_output_is_redacted_even_for_unknown_values() -> None:
    log = "UPSTREAM_BEARER=abc-very-secret\nCUDA_VISIBLE_DEVICES=0\nHF_TOKEN=zzz-unknown-1\n"
    text, n = Redactor().text(log)
    assert "abc-very-secret" not in text and "zzz-unknown-1" not in text
    assert "CUDA_VISIBLE_DEVICES=0" in text
    assert n == 2


def test_output_is_scrubbed_of_secrets_learned_from_env_and_argv() -> None:
    red = Redactor.from_sources(
        {
            "UPSTREAM_BEARER": "eyJbare.token.value",
            "EXTRA_HEADERS": "Authorization: Bearer hdr-token-777",
            "PIP_INDEX_URL": "https://bob:pw-4242zz@pypi.example.com/simple",
            "TOKENIZERS_PARALLELISM": "false",
        },
        ["engine", "--api-key", "key-flag-99", "--tokenizer", "/models/tok"],
    )
    log = (
        "got eyJbare.token.value\nheader hdr-token-777\npassword pw-4242zz\n"
        "argv: ['engine', '--api-key', 'key-flag-99']\n"
        "Namespace(api_key='key-flag-99', tokenizer='/models/tok')\n"
    )
    text, n = red.text(log)
    for secret in ("eyJbare.token.value", "hdr-token-777", "pw-4242zz", "key-flag-99"):
        assert secret not in text
    assert "/models/tok" in text
    assert "false" not in red.known
    assert n >= 5


def test_shaped_secrets_are_scrubbed_without_knowing_them() -> None:
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAB3NzaC1yc2E\n-----END OPENSSH PRIVATE KEY-----"
    text = scrub_text(
        "hf_abcdefghijklmnopqrstuvwxyz012345 ghp_abcdefghijklmnopqrstuvwxyz0123456789 "
        "Cookie: session=s3ss10n; other=1\n"
        "{'api_key': 'quoted-secret'} X-Api-Key: hdr-secret-1 --token=cli-secret " + pem
    )
    for secret in ("hf_abc", "ghp_abc", "s3ss10n", "quoted-secret", "hdr-secret-1", "cli-secret", "AAAAB3N"):
        assert secret not in text, text


def test_scrub_keeps_ordinary_log_lines_and_references() -> None:
    lines = (
        "INFO max_num_batched_tokens=8192 max_tokens=16 tokenizer='/m' api_key=None\n"
        'env = { HF_TOKEN = "${HF_TOKEN}" }\n'
    )
    assert scrub_text(lines) == lines


def test_pip_freeze_keeps_package_names_but_not_credentials() -> None:
    freeze = "google-auth==2.30.0\npyjwt==2.8.0\nmypkg @ git+https://user:ghtok-123456@github.com/o/r@abc\n"
    out = scrub_text(freeze, names=False)
    assert "google-auth==2.30.0" in out and "pyjwt==2.8.0" in out
    assert "ghtok-123456" not in out


# --- kernel ------------------------------------------------------------------------------------------------


BOOT = datetime(2026, 9, 9, tzinfo=UTC)


def test_one_bad_kernel_line_does_not_lose_the_others() -> None:
    text = "\n".join(
        [
            "[99999999999999999999.0] NVRM: Xid (PCI:0000:01:00): 79, pid=1",
            "0001-01-01T00:00:00+01:00 NVRM: Xid (PCI:0000:02:00): 13, pid=2",
            "NVRM: Xid (PCI:0000:03:00): " + "9" * 5000,
            "[   12.5] NVRM: Xid (PCI:0000:04:00): 48, pid=3",
        ]
    )
    events = parse_kernel_log(text, boot_time=BOOT)
    assert [e["device"] for e in events] == [f"PCI:0000:0{i}:00" for i in range(1, 5)]
    assert [e.get("xid") for e in events] == [79, 13, None, 48]  # the 5,000-digit number is not an Xid
    assert events[0]["time"] is None and events[1]["time"] is None
    assert events[3]["time"] is not None


def test_huge_since_is_an_input_error() -> None:
    with pytest.raises(InputError):
        parse_since("9" * 40 + " days ago")


# --- nested TOML --------------------------------------------------------------------------------------------


def test_deeply_nested_signatures_toml_is_a_config_error(tmp_path: Path) -> None:
    p = tmp_path / "sig.toml"
    p.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError):
        load_signatures(p)


def test_deeply_nested_campaign_table_is_a_config_error(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n")
    with pytest.raises(ConfigError):
        load_campaign(p)


# --- model folders --------------------------------------------------------------------------------


def _hf_repo(root: Path) -> tuple[Path, Path]:
    repo = root / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    return repo, snap


@pytest.mark.parametrize("rev", ["../../outside", "..", ".", "abc123/../../..", "/etc", "nope"])
def test_refs_main_must_name_a_snapshot(tmp_path: Path, rev: str) -> None:
    repo, _snap = _hf_repo(tmp_path)
    (tmp_path / "outside").mkdir()
    (repo / "refs" / "main").write_text(rev)
    with pytest.raises(InputError, match="not a snapshot folder"):
        resolve_model(repo)


def test_hf_snapshot_links_must_stay_in_the_repo_blobs(tmp_path: Path) -> None:
    repo, snap = _hf_repo(tmp_path)
    secret = tmp_path / "secret.env"
    secret.write_text("HF_TOKEN=hf_x")
    other = tmp_path / "models--org--other" / "blobs"
    other.mkdir(parents=True)
    (other / ("d" * 64)).write_text("other repo")
    (repo / "blobs" / ("e" * 40)).write_text("fine")
    (snap / "config.json").symlink_to("../../blobs/" + "e" * 40)
    (snap / "tokenizer.json").symlink_to(secret)
    (snap / "vocab.json").symlink_to("../../../models--org--other/blobs/" + "d" * 64)
    (snap / "loop").symlink_to("loop")
    scan = scan_model(resolve_model(repo))
    by = {f.rel: f for f in scan.files}
    assert by["config.json"].problem and "does not match" in by["config.json"].problem  # read and checked
    for rel in ("tokenizer.json", "vocab.json"):
        assert by[rel].problem and "outside the repo's blobs/ folder" in by[rel].problem
        assert by[rel].digests is None
    assert by["loop"].problem and "loop" in by["loop"].problem
    assert scan.verification == "failed"


def test_plain_folder_links_inside_are_followed_and_outside_refused(tmp_path: Path) -> None:
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "sub" / "weights.bin").write_bytes(b"w" * 100)
    (model / "alias.bin").symlink_to("sub/weights.bin")
    (model / "up.bin").symlink_to("../outside.bin")
    (tmp_path / "outside.bin").write_bytes(b"o")
    os.mkfifo(model / "pipe")
    scan = scan_model(resolve_model(model))
    by = {f.rel: f for f in scan.files}
    assert by["alias.bin"].problem is None and by["alias.bin"].size == 100
    assert by["up.bin"].problem and "outside the model folder" in by["up.bin"].problem
    assert by["pipe"].problem and "not a regular file" in by["pipe"].problem


def test_store_never_copies_a_file_a_link_escapes_to(tmp_path: Path, home: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    secret = tmp_path / "secret.txt"
    marker = "escaped-secret-" + os.urandom(8).hex()
    secret.write_text(marker)
    (model / "tokenizer.json").symlink_to(secret)
    r = run_ledger("collect", "model", str(model), "--home", str(home), "--store", "--json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["verification"] == "failed"
    assert any("tokenizer.json" in f and "outside the model folder" in f for f in out["failures"])
    for f in (home / "store").rglob("*"):
        if f.is_file():
            assert marker.encode() not in f.read_bytes()
    lg = Ledger.open(home)
    try:
        assert lg.size() >= 1
    finally:
        lg.close()


def test_symlink_loop_never_raises(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "a").symlink_to("b")
    (model / "b").symlink_to("a")
    try:
        scan = scan_model(resolve_model(model))
    except LedgerError:  # pragma: no cover - refusing is acceptable too
        return
    assert all(f.problem for f in scan.files)


def test_linked_folders_inside_are_pinned_outside_and_loops_reported(tmp_path: Path) -> None:
    """A folder link used to be skipped silently: its files were missing from the pin, unreported."""
    model = tmp_path / "model"
    (model / "shared" / "tok").mkdir(parents=True)
    (model / "shared" / "tok" / "vocab.json").write_text('{"a": 1}')
    (model / "tokenizer").symlink_to("shared/tok", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.txt").write_text("s")
    (model / "extra").symlink_to("../elsewhere", target_is_directory=True)
    (model / "shared" / "back").symlink_to("..", target_is_directory=True)  # to the model folder
    (model / "a").mkdir()
    (model / "b").mkdir()
    (model / "a" / "to_b").symlink_to("../b", target_is_directory=True)
    (model / "b" / "to_a").symlink_to("../a", target_is_directory=True)
    scan = scan_model(resolve_model(model))
    by = {f.rel: f for f in scan.files}
    assert by["tokenizer/vocab.json"].problem is None
    assert by["tokenizer/vocab.json"].digests == by["shared/tok/vocab.json"].digests
    assert by["extra"].problem and "outside the model folder" in by["extra"].problem
    assert not any(rel.startswith("extra/") for rel in by)
    assert by["shared/back"].problem and "loop" in by["shared/back"].problem
    loops = [rel for rel, f in by.items() if f.problem and "loop" in f.problem]
    assert "a/to_b/to_a" in loops and "b/to_a/to_b" in loops
    assert scan.verification == "failed"


@pytest.mark.parametrize("campaign", ["..", ".", "...", "a/../..", "../../etc"])
def test_a_campaign_named_dots_keeps_its_work_folder_under_the_homes_runs(
    tmp_path: Path, campaign: str
) -> None:
    """Regression: a campaign named ``..`` kept its name as the folder of its raw outputs, and
    ``runs/..`` is the home itself: the work folders of ``ledger collect`` landed beside the database. Every
    campaign's work folder is a folder of its own under ``runs/``."""
    from ledger.cli.collect import _work_dir

    d = _work_dir(tmp_path, campaign, "host")
    runs = (tmp_path / "runs").resolve()
    assert d.resolve().parent.parent == runs, d
    assert d.resolve().parent.name.strip(".") != ""
