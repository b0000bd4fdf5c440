"""fix71: a reviewer bundle of a verdict asked in more words holds the campaign's rows the verdict judged.

The verdict reads every entry of the campaign (``verdict.judged_scope``); ``create_bundle`` read only the
entries naming every field asked, so a bundle of ``campaign=C&host=H`` after a crash of C that left host out
was refused ("the verdict names entries the snapshot lacks"). (Needs the ledger/bundle.py proposal in
/tmp/fix71/other.md applied.)"""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

from ledger.bundle import create_bundle, verify_bundle
from ledger.entries import format_time, parse_time
from ledger.policy.fixtures import build_fixture_ledger
from ledger.policy.loader import load_policy
from ledger.service import Ledger

FIXTURE = Path(__file__).resolve().parent.parent / "policies/fixtures/backend-qualification/qualified.toml"
FULL = {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}


def test_a_bundle_of_the_campaign_asked_with_its_host_lacks_the_campaigns_crash(tmp_path: Path) -> None:
    led, _spec, b = build_fixture_ledger(FIXTURE, tmp_path / "home", init=Ledger.init)
    try:
        last = parse_time(led.get_seq(led.size() - 1).logged_at)
        at = format_time(last + timedelta(minutes=5))
        crash = {k: v for k, v in FULL.items() if k != "host"}
        payload = {
            "engine": "vllm",
            "command": ["vllm", "serve", "/models/m"],
            "started_at": at,
            "ready": False,
            "exit_code": 1,
            "failure_signature": "EngineCore failed",
        }
        b._append("engine.launch", crash, payload, b.keys["collector"], at=at)
        later = format_time(last + timedelta(minutes=6))
        b._append("note", {"campaign": "other"}, {"text": "after"}, b.keys["operator"], at=later)
        for subject in (FULL, {"campaign": "vllm-embed"}, {"campaign": "vllm-embed", "host": "GPU-BOX-1"}):
            buf = io.BytesIO()
            create_bundle(led, dict(subject), load_policy("backend-qualification"), buf)
            path = tmp_path / "bundle.zip"
            path.write_bytes(buf.getvalue())
            report = verify_bundle(path)
            assert report.ok, (subject, report)
            assert report.verdict == "NOT QUALIFIED — RUNTIME RELIABILITY", (subject, report.verdict)
    finally:
        led.close()
