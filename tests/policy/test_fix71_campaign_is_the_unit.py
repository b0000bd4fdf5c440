"""fix71 (audit 65 f1): a verdict asked in other words never drops the campaign's own evidence.

Before, ``campaign=C&host=H`` read only the entries naming both: a later crashed launch of campaign C whose
subject left host out, or spelled it ``GPU-BOX-1``, was no evidence of the question, so the verdict for the
campaign with its host came out QUALIFIED while the campaign alone was NOT QUALIFIED — and a verdict recorded
in those words let the route through. Now the campaign is the unit of judgement (``verdict.judged_scope``):
every entry of the campaign is read, and the other fields are claims checked against its own entries
(``claims``): one that names another value (a host compared by ``host_key``) or none at all keeps a QUALIFIED
from standing (INCONCLUSIVE, naming the entries and field). The verdict for the campaign with more fields is
never better than for the campaign alone."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger.entries import format_time, parse_time
from ledger.policy.fixtures import build_fixture_ledger, discover_fixtures
from ledger.policy.loader import load_policy
from ledger.policy.routing import check_routing_change
from ledger.policy.snapshot import clear_caches
from ledger.policy.verdict import evaluate, judge_again_at, record_verdict
from ledger.service import Ledger

FIXTURES = Path(__file__).resolve().parents[2] / "policies" / "fixtures"
QUALIFIED_FIXTURE = FIXTURES / "backend-qualification" / "qualified.toml"
ROUTER_FIXTURE = FIXTURES / "routing-change" / "seed004-router.toml"
RANK = {"QUALIFIED": 2, "INCONCLUSIVE": 1}  # anything else (NOT QUALIFIED — …) ranks 0


def rank(verdict: str) -> int:
    return RANK.get(verdict, 0)


def _crash(led: Ledger, builder: Any, subject: dict[str, str], minutes: int = 5) -> None:
    """A later crashed launch of the campaign under ``subject``, logged after the fixture's last entry."""
    last = parse_time(led.get_seq(led.size() - 1).logged_at)
    at = format_time(last + timedelta(minutes=minutes))
    builder._append(
        "engine.launch",
        subject,
        {
            "engine": "vllm",
            "command": ["vllm", "serve", "/models/m"],
            "started_at": at,
            "ready": False,
            "exit_code": 1,
            "failure_signature": "EngineCore failed",
        },
        builder.keys["collector"],
        at=at,
    )


def _verdict(led: Ledger, subject: dict[str, str]) -> dict[str, Any]:
    return evaluate(led, subject, load_policy("backend-qualification"))


FULL = {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B", "host": "gpu-box-1"}
CRASHES = {
    "host_dropped": {"campaign": "vllm-embed", "backend": "vllm", "model": "Qwen3-Embedding-8B"},
    "host_case": {**FULL, "host": "GPU-BOX-1"},
    "model_dropped": {"campaign": "vllm-embed", "backend": "vllm", "host": "gpu-box-1"},
    "backend_case": {**FULL, "backend": "vLLM"},
    "only_campaign": {"campaign": "vllm-embed"},
}
ASKED = {
    "host": {"campaign": "vllm-embed", "host": "gpu-box-1"},
    "host_upper": {"campaign": "vllm-embed", "host": "GPU-BOX-1"},
    "model": {"campaign": "vllm-embed", "model": "Qwen3-Embedding-8B"},
    "backend": {"campaign": "vllm-embed", "backend": "vllm"},
    "all": FULL,
    "all_reordered": dict(reversed(list(FULL.items()))),
}


@pytest.fixture(scope="module")
def qualified_home(tmp_path_factory: pytest.TempPathFactory) -> Any:
    led, _spec, builder = build_fixture_ledger(
        QUALIFIED_FIXTURE, tmp_path_factory.mktemp("q") / "home", init=Ledger.init
    )
    yield led, builder
    led.close()


def test_the_control_asked_in_every_wording_is_qualified(qualified_home: Any) -> None:
    led, _ = qualified_home
    clear_caches()
    assert _verdict(led, {"campaign": "vllm-embed"})["verdict"] == "QUALIFIED"
    for name, asked in ASKED.items():
        r = _verdict(led, asked)
        assert r["verdict"] == "QUALIFIED", (name, r["verdict"], r.get("claims"))
        assert r["subject"] == asked
        assert all(c["status"] == "holds" for c in r["claims"]), r["claims"]
    assert "claims" not in _verdict(led, {"campaign": "vllm-embed"})  # the campaign alone: as before


@pytest.mark.parametrize("crash", sorted(CRASHES))
def test_naming_host_backend_or_model_beside_the_campaign_drops_none_of_its_failures(
    crash: str, tmp_path: Path
) -> None:
    led, _spec, builder = build_fixture_ledger(QUALIFIED_FIXTURE, tmp_path / "home", init=Ledger.init)
    try:
        _crash(led, builder, CRASHES[crash])
        clear_caches()
        alone = _verdict(led, {"campaign": "vllm-embed"})["verdict"]
        assert alone == "NOT QUALIFIED — RUNTIME RELIABILITY"
        for name, asked in ASKED.items():
            r = _verdict(led, asked)
            assert r["verdict"] == alone, (crash, name, r["verdict"], r.get("claims"))
    finally:
        led.close()


@pytest.mark.parametrize(
    ("field", "stored", "asked"),
    [
        ("host", "gpu-box-2", "gpu-box-1"),  # another host
        ("backend", "vLLM", "vllm"),  # another spelling of a field compared exactly
        ("model", "Qwen3-Embedding-4B", "Qwen3-Embedding-8B"),
    ],
)
def test_a_claim_the_campaigns_entries_contradict_is_inconclusive_naming_them(
    field: str, stored: str, asked: str, tmp_path: Path
) -> None:
    """A passing entry of the campaign names another value: the question with the field is INCONCLUSIVE
    naming the entry and the field (not QUALIFIED, not dropped); the campaign alone is INCONCLUSIVE too, its
    own entries naming two values of a route field (a ``split``, audit 74 f1)."""
    led, _spec, builder = build_fixture_ledger(QUALIFIED_FIXTURE, tmp_path / "home", init=Ledger.init)
    try:
        last = parse_time(led.get_seq(led.size() - 1).logged_at)
        at = format_time(last + timedelta(minutes=1))
        note = builder._append(
            "note", {**FULL, field: stored}, {"text": "x"}, builder.keys["operator"], at=at
        )
        clear_caches()
        alone = _verdict(led, {"campaign": "vllm-embed"})
        assert alone["verdict"] == "INCONCLUSIVE"
        [split] = alone["claims"]
        assert split["field"] == field and split["status"] == "split"
        assert note.entry_id in [e["entry"] for e in split["entries"]]
        r = _verdict(led, {"campaign": "vllm-embed", field: asked})
        assert r["verdict"] == "INCONCLUSIVE" and r["status"] == "inconclusive"
        [claim] = r["claims"]
        assert claim["field"] == field and claim["status"] == "contradicted"
        assert [e["entry"] for e in claim["entries"]] == [note.entry_id]
        assert note.entry_id[:16] in claim["detail"] and f"{field}={stored}" in claim["detail"]
        # asked with the value the entry names: the other entries contradict it now
        other = _verdict(led, {"campaign": "vllm-embed", field: stored})
        assert other["verdict"] == "INCONCLUSIVE"
    finally:
        led.close()


def test_a_field_no_entry_of_the_campaign_names_cannot_be_told(qualified_home: Any) -> None:
    led, _ = qualified_home
    clear_caches()
    r = _verdict(led, {"campaign": "vllm-embed", "gpu": "0"})
    assert r["verdict"] == "INCONCLUSIVE"
    [claim] = r["claims"]
    assert claim["status"] == "untold" and "no entry of campaign vllm-embed names gpu" in claim["detail"]


def test_a_verdict_recorded_in_more_words_after_a_crash_is_not_qualified_and_the_route_refused(
    tmp_path: Path,
) -> None:
    """The auditor's path: `ledger verdict --subject campaign=… --subject host=… --record`, then routing."""
    spec_check: dict[str, Any] = {}

    def run(crash: bool, home: Path) -> tuple[str, bool]:
        led, spec, builder = build_fixture_ledger(ROUTER_FIXTURE, home, init=Ledger.init)
        try:
            spec_check.update(spec["checks"][0])
            subject = dict(spec["defaults"]["subject"])
            if crash:
                _crash(
                    led,
                    builder,
                    {"campaign": subject["campaign"], "backend": "vllm", "model": subject["model"]},
                )
            clear_caches()
            result = evaluate(led, subject, load_policy("backend-qualification"))
            last = parse_time(led.get_seq(led.size() - 1).logged_at)
            record_verdict(
                led,
                result,
                key="admin",
                at=last + timedelta(minutes=1),
                judge_at=judge_again_at(led, result, load_policy("backend-qualification")),
            )
            clear_caches()
            checked = check_routing_change(
                led,
                load_policy("routing-change"),
                dict(spec_check["subject"]),
                action="route",
                deployment=spec_check["deployment"],
                now=parse_time(spec_check["now"]),
            )
            return str(result["verdict"]), bool(checked["allowed"])
        finally:
            led.close()

    assert run(False, tmp_path / "control") == ("QUALIFIED", True)  # the control: the test can fail
    verdict, allowed = run(True, tmp_path / "crash")
    assert verdict == "NOT QUALIFIED — RUNTIME RELIABILITY"
    assert allowed is False


def _qualification_fixtures() -> list[Path]:
    return [p for p in discover_fixtures() if p.parent.name == "backend-qualification"]


def _variants(own: dict[str, str]) -> list[dict[str, str]]:
    """The campaign's own host/backend/model fields, each alone and all together, as stored and in
    another case (a host in another case is the same host; another field is a contradiction)."""
    fields = {k: v for k, v in own.items() if k in ("host", "backend", "model")}
    out: list[dict[str, str]] = []
    for spell in (str, str.upper, str.swapcase):
        out += [{k: spell(v)} for k, v in fields.items()]
        out.append({k: spell(v) for k, v in fields.items()})
    return out


@pytest.mark.parametrize("path", _qualification_fixtures(), ids=lambda p: p.stem)
def test_adding_the_campaigns_own_fields_in_any_case_never_improves_its_verdict(
    path: Path, tmp_path: Path
) -> None:
    """Property over the shipped fixtures: for each fixture campaign, before and after a later crashed
    launch that names only the campaign, the verdict asked with its own host/backend/model fields (any
    case, alone or together) is never better than the verdict for the campaign alone."""
    led, spec, builder = build_fixture_ledger(path, tmp_path / "home", init=Ledger.init)
    try:
        own = dict(spec.get("defaults", {}).get("subject", {}))
        if not own.get("campaign"):
            pytest.fail(f"{path.name}: the fixture's subject names no campaign")
        campaign = {"campaign": own["campaign"]}
        for crashed in (False, True):
            if crashed:
                _crash(led, builder, campaign, minutes=1)
            clear_caches()
            alone = _verdict(led, campaign)["verdict"]
            if crashed:
                assert rank(alone) < rank("QUALIFIED"), (path.name, alone)
            for extra in _variants(own):
                asked = {**campaign, **extra}
                got = _verdict(led, asked)["verdict"]
                assert rank(got) <= rank(alone), (path.name, crashed, asked, got, alone)
    finally:
        led.close()
