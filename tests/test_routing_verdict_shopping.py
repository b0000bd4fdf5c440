"""No verdict shopping: a campaign that failed stands against the route of its backend, model and host.

Before, `ledger check routing-change` followed the most recently recorded verdict among the campaigns that
share the route's backend, model and host: a team whose campaign came out NOT QUALIFIED opened a second
campaign, and its QUALIFIED allowed the route while the failure stood. Now every other campaign of the
subject that the log took a job, launch or verdict of within the policy's verdict_max_age is judged again at
the check's reference time (`standing_failures`, check `no-standing-failure`)."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from ledger.entries import format_time, parse_time
from tests.policy.test_fail_closed import entry, qualified_entries
from tests.test_routing_at_reference_time import route_campaign
from tests.test_routing_restore_and_faults import ROUTE_NOW, VERDICT

SHIFT = timedelta(minutes=-55)  # the failed campaign ran the same morning, before the one that passed


def _shift(when: str, by: timedelta) -> str:
    return format_time(parse_time(when) + by)


def moved(es: list[dict[str, Any]], by: timedelta) -> list[dict[str, Any]]:
    """``es`` run ``by`` later (or earlier): every time it states moved."""
    for e in es:
        for k in ("at", "logged_at"):
            if k in e:
                e[k] = _shift(e[k], by)
        for k in ("started_at", "ended_at", "collected_at"):
            if k in e.get("payload", {}):
                e["payload"][k] = _shift(e["payload"][k], by)
    return es


def failed_campaign(
    name: str = "shop-a", by: timedelta = SHIFT, subject: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The QUALIFIED neighbour campaign run again as ``name`` (``by`` earlier), whose engine died on its
    first completion (seed 003: NOT QUALIFIED — RUNTIME RELIABILITY)."""
    es = qualified_entries()
    entry(es, "launch")["payload"].update(failure_signature="engine-dead", exit_code=-6, signal=6)
    entry(es, "completion")["payload"].update(ok=False, text=None, error="EngineDeadError")
    for e in es:
        e["name"] = f"{name}-{e['name']}"
        # the entry's own subject fields kept (a reviewed result names the commit it was produced at)
        e["subject"] = {**e.get("subject", {}), "campaign": name, **(subject or {})}
        e["refs"] = {rel: f"{name}-{t}" for rel, t in e.get("refs", {}).items()}
        if e["kind"] == "job":
            e["payload"]["job_id"] = f"{name}-job"
    return moved(es, by)


def _route(
    tmp_path: Path,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]] | None = None,
    later: timedelta = timedelta(0),
) -> dict[str, Any]:
    """``before``, then the QUALIFIED neighbour campaign and its recorded verdict (``later``), then
    ``after``; routed the next morning."""
    qualified = moved([*qualified_entries(), copy.deepcopy(VERDICT)], later)
    return route_campaign(tmp_path, [*before, *qualified, *(after or [])], _shift(ROUTE_NOW, later))


def _failed_checks(r: dict[str, Any]) -> set[str]:
    return {c["name"] for c in r["checks"] if c["status"] == "failed"}


def test_a_second_campaigns_qualified_does_not_lift_the_first_campaigns_failure(tmp_path: Path) -> None:
    assert _route(tmp_path, [])["allowed"] is True  # the control: no other campaign
    r = _route(tmp_path, failed_campaign())
    assert r["allowed"] is False
    assert _failed_checks(r) == {"no-standing-failure"}, r["reasons"]
    [reason] = r["reasons"]
    assert reason.startswith("campaign shop-a of the same backend=vllm host=gpu-box-1 model=m-7 is "), reason
    assert "NOT QUALIFIED — RUNTIME RELIABILITY as judged now (runtime-stability: " in reason, reason
    [f] = r["standing_failures"]
    assert f["campaign"] == "shop-a" and f["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY"


def test_a_failed_campaign_whose_verdict_was_never_recorded_still_stands(tmp_path: Path) -> None:
    """Found by its job and launch, not by a verdict entry: not recording the failure does not hide it."""
    es = failed_campaign()
    assert not any(e["kind"] == "verdict" or "record_verdict" in e for e in es)
    assert _route(tmp_path, es)["allowed"] is False


def test_a_failed_campaign_recorded_after_the_qualified_one_stands_too(tmp_path: Path) -> None:
    r = _route(tmp_path, [], failed_campaign(by=timedelta(hours=2)))
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]


def test_superseding_the_failing_evidence_lifts_the_standing_failure(tmp_path: Path) -> None:
    sup = {"name": "sup", "kind": "supersession", "key": "reviewer", "at": "2026-09-10T11:30:00Z",
           "subject": {"campaign": "shop-a"}, "refs": {"supersedes": ["shop-a-launch", "shop-a-completion"]},
           "payload": {"reason": "fixed by the engine upgrade the second campaign runs"}}  # fmt: skip
    r = _route(tmp_path, failed_campaign(), [sup])
    assert r["allowed"] is True, r["reasons"]
    assert r["standing_failures"] == []


def _other_revision(es: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The campaign run on another revision of the model: its spec, pin and launch bind 2222…."""
    rev = "2" * 40
    for e in es:
        if e["kind"] == "model.pin":
            e["payload"]["revision"] = rev
        for b in (e["payload"].get("bindings"), e["payload"].get("spec", {}).get("bindings")):
            if isinstance(b, dict) and "model_revision" in b:
                b["model_revision"] = rev
    return es


def test_another_hosts_or_models_failed_campaign_does_not_refuse_the_route(tmp_path: Path) -> None:
    # it ran on gpu-box-2: labelled so, its spec binds it and its probe shows it
    assert _route(tmp_path, _bound_host(failed_campaign(subject={"host": "gpu-box-2"}), "gpu-box-2"))[
        "allowed"
    ]
    r = _route(tmp_path, _other_revision(failed_campaign(subject={"model": "m-8"})))
    assert r["allowed"] is True, r["reasons"]
    es = failed_campaign(subject={"backend": "sglang"})
    for e in es:  # it ran sglang: its spec and launch bind that engine
        for b in (e["payload"].get("bindings"), e["payload"].get("spec", {}).get("bindings")):
            if isinstance(b, dict) and "engine" in b:
                b["engine"] = "sglang"
        if e["kind"] == "engine.launch":
            e["payload"]["engine"] = "sglang"
    assert _route(tmp_path, es)["allowed"] is True
    # a host compares as a host name: another spelling of this host is this host
    r = _route(tmp_path, failed_campaign(subject={"host": "GPU-BOX-1"}))
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]


def test_a_failed_campaign_spelling_the_model_otherwise_still_stands(tmp_path: Path) -> None:
    """Found by an audit: the failed campaign spelled the model another way and was not found. Its name,
    case aside, is the model; so is another name for the revision the route's own campaign binds. (A value
    with white space around it is refused at ingest since fix71: tests/test_fix71_subject_whitespace.py.)"""
    for model in ("M-7", "m-7-renamed"):
        r = _route(tmp_path, failed_campaign(subject={"model": model}))
        assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, (model, r["reasons"])


def test_a_failed_campaign_leaving_out_its_backend_label_still_stands(tmp_path: Path) -> None:
    """Found by an audit: its entries named no backend, though its spec and launches bind engine vllm."""
    r = _route(tmp_path, failed_campaign(subject={"backend": None}))
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]
    # the backend it binds is what it ran: a label naming another backend does not hide it either
    es = failed_campaign(subject={"backend": "vllm-renamed"})
    r = _route(tmp_path, es)
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]


def test_a_crash_behind_a_missing_host_probe_still_stands(tmp_path: Path) -> None:
    """Found by an audit: without a host probe the failed campaign's ladder stops at host-prerequisites
    (INCONCLUSIVE) and never reaches the crash; the gate past the stop that fails on its evidence all the
    same (`failing_beyond_ladder`) stands against the route."""
    es = [e for e in failed_campaign() if e["kind"] != "host.probe"]
    r = _route(tmp_path, es)
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]
    [f] = r["standing_failures"]
    assert f["verdict"] == "INCONCLUSIVE"
    assert "but past where its ladder stopped runtime-stability fails" in f["reason"], f["reason"]


def test_a_failure_older_than_the_verdict_bound_no_longer_stands(tmp_path: Path) -> None:
    """The failed campaign ran the morning of 09-10; the passing one (and the route) 8 days later."""
    r = _route(tmp_path, failed_campaign(), later=timedelta(days=8))
    assert r["allowed"] is True, r["reasons"]
    r = _route(tmp_path, failed_campaign(), later=timedelta(days=6))
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]


def test_a_failed_campaign_claiming_old_times_is_judged_by_when_the_log_took_it(tmp_path: Path) -> None:
    """Its job and launch entries claim to have been collected 8 days ago, but the log took them this
    morning: the bound reads the log's time, not the claim."""
    es = failed_campaign()
    for e in es:
        if e["kind"] in ("job", "engine.launch"):
            e["logged_at"] = e["at"]
            e["at"] = _shift(e["at"], timedelta(days=-8))
            if "started_at" in e["payload"] and e["kind"] == "engine.launch":
                e["payload"]["started_at"] = _shift(e["payload"]["started_at"], timedelta(days=-8))
    r = _route(tmp_path, es)
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]


def test_an_unfinished_other_campaign_does_not_refuse_the_route(tmp_path: Path) -> None:
    """INCONCLUSIVE is no failure: a campaign whose job never ended judges nothing against the route."""
    es = [e for e in failed_campaign() if e["name"] != "shop-a-campaign-done"]
    for e in es:
        if e["name"] == "shop-a-launch":
            e["payload"].update(failure_signature=None, exit_code=None, signal=None)
    r = _route(tmp_path, [e for e in es if e["name"] != "shop-a-completion"])
    assert r["standing_failures"] == [], r["standing_failures"]


def test_the_verdict_shows_a_failure_past_where_its_ladder_stopped(tmp_path: Path, cli: Any) -> None:
    """The INCONCLUSIVE campaign whose crash sits behind a missing host probe says so: the JSON's
    `failing_beyond_ladder`, a table in `ledger verdict` (on a pipe: one tab-separated line per row), and
    a table on the verdict page."""
    from fastapi.testclient import TestClient

    from ledger.api.app import create_app
    from ledger.api.settings import ApiSettings
    from tests.test_routing_at_reference_time import _campaign_home

    es = [e for e in failed_campaign() if e["kind"] != "host.probe"]
    home, ledger, _b = _campaign_home(tmp_path, es)
    r = cli("verdict", "--home", str(home), "--subject", "campaign=shop-a", "--json")
    v = json.loads(r.out)
    assert v["verdict"] == "INCONCLUSIVE"
    b = v["failing_beyond_ladder"][0]  # the first, in ladder order (ready-control fails after it)
    assert (
        b["gate"] == "runtime-stability" and b["verdict_if_failed"] == "NOT QUALIFIED — RUNTIME RELIABILITY"
    )
    r = cli("verdict", "--home", str(home), "--subject", "campaign=shop-a")
    assert any(
        line.startswith("runtime-stability\tNOT QUALIFIED — RUNTIME RELIABILITY\t")
        for line in r.out.splitlines()
    ), r.out
    app = create_app(ApiSettings(home=str(home), public_reads=True), ledger=ledger)
    with TestClient(app) as client:
        page = client.get("/verdict", params={"subject": "campaign=shop-a"})
    ledger.close()
    assert page.status_code == 200
    assert "Failures past where the ladder stopped" in page.text
    assert '<span class="tag bad">runtime-stability</span>' in page.text

    # a ladder that failed where it stopped is a failure already: nothing is listed past it
    home2, ledger2, _b = _campaign_home(tmp_path / "failed", failed_campaign())
    ledger2.close()
    r = cli("verdict", "--home", str(home2), "--subject", "campaign=shop-a", "--json")
    v = json.loads(r.out)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY" and v["failing_beyond_ladder"] == []


def _relabel(
    es: list[dict[str, Any]], kinds: tuple[str, ...], subject: dict[str, Any]
) -> list[dict[str, Any]]:
    for e in es:
        if e["kind"] in kinds:
            e["subject"] = {**e["subject"], **subject}
    return es


CAMPAIGN_KINDS = ("job", "engine.launch", "verdict")


def test_a_failed_campaign_whose_job_and_launch_carry_no_labels_still_stands(tmp_path: Path) -> None:
    """Found by an audit of this rule: candidates were found by the route's exact labels, so a failed campaign
    whose job, launch and verdict carry only their campaign (or spell the model and backend otherwise, with
    no host) was never looked at. Now every campaign the log took such an entry of within the bound is a
    candidate unless what it tells — labels, the engine, host and revision its spec binds — says otherwise."""
    es = _relabel(failed_campaign(), CAMPAIGN_KINDS, {"host": None, "model": None, "backend": None})
    r = _route(tmp_path, es)
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]
    es = _relabel(failed_campaign(), CAMPAIGN_KINDS, {"host": None, "model": "M-7", "backend": "VLLM"})
    r = _route(tmp_path, es)
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]


def _bound_host(es: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    for e in es:
        bindings = e["payload"].get("spec", {}).get("bindings")
        if isinstance(bindings, dict):
            bindings["hostname"] = host
        if e["kind"] == "host.probe":
            e["payload"]["hostname"] = host
    return es


def test_a_host_label_naming_another_host_does_not_hide_a_failure_its_spec_binds_here(tmp_path: Path) -> None:
    """Found by the same audit: labelled gpu-box-2 everywhere, but its approved spec binds (and its host
    probe shows) gpu-box-1 — the route's machine: it ran here."""
    es = _bound_host(failed_campaign(subject={"host": "gpu-box-2"}), "gpu-box-1")
    r = _route(tmp_path, es)
    assert r["allowed"] is False and _failed_checks(r) == {"no-standing-failure"}, r["reasons"]


def test_an_unlabelled_failed_campaign_whose_spec_binds_another_host_does_not_refuse(tmp_path: Path) -> None:
    """The neighbour the other way: its job and launch carry no host, its spec binds gpu-box-2 and its
    probe and pin are gpu-box-2's — it ran elsewhere, and is not this route's."""
    es = _bound_host(failed_campaign(subject={"host": "gpu-box-2"}), "gpu-box-2")
    es = _relabel(es, CAMPAIGN_KINDS, {"host": None})
    r = _route(tmp_path, es)
    assert r["allowed"] is True, r["reasons"]
