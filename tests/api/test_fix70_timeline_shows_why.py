"""Audit 60 f2: a campaign's timeline page said "Verdict now: INCONCLUSIVE" beside a gate ladder of passed
gates and "Rejected evidence: nothing rejected" — it drew the rejected table from the log's own notes only
(supersessions, rejecting acceptances, review FAILs, recorded verdicts on that page), never from the verdict
it derived, so its rejected evidence, what no gate judges and the failures past where the ladder stopped
were shown nowhere. `ledger verdict`, ``GET /v1/verdict`` and the /verdict page named them.

The timeline now includes the /verdict page's own partial (``_ladder.html``) for the verdict now, on every
page of the timeline, and keeps the log's notes under a heading of their own.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from ledger.api import views
from ledger.api.app import create_app
from ledger.api.settings import ApiSettings
from ledger.service import Ledger
from tests.policy.test_fail_closed import SUBJECT, qualified_entries
from tests.test_routing_at_reference_time import _campaign_home
from tests.test_routing_verdict_shopping import failed_campaign, moved

CAMPAIGN = SUBJECT["campaign"]
LOG_NOTES = "The log's own notes against this page's entries"


@dataclass
class Site:
    client: TestClient
    ledger: Ledger
    campaign: str

    def timeline(self, after: int | None = None) -> str:
        r = self.client.get(views.subject_href("campaign", self.campaign, after=after))
        assert r.status_code == 200, r.text
        return r.text

    def ladder_page(self) -> str:
        r = self.client.get(views.verdict_href({"campaign": self.campaign}))
        assert r.status_code == 200, r.text
        return r.text

    def verdict(self) -> dict[str, Any]:
        r = self.client.get("/v1/verdict", params={"subject": f"campaign={self.campaign}"})
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out


@contextmanager
def site(tmp_path: Path, entries: list[dict[str, Any]], campaign: str = CAMPAIGN) -> Iterator[Site]:
    home, ledger, _builder = _campaign_home(tmp_path, entries)
    app = create_app(ApiSettings(home=str(home), public_reads=True), ledger=ledger)
    try:
        with TestClient(app) as client:
            yield Site(client, ledger, campaign)
    finally:
        ledger.close()


def text(fragment: str) -> str:
    """What a reader reads of an HTML fragment: tags dropped, entities decoded, spaces folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def section(body: str, heading: str) -> str:
    """The HTML from the ``<h2>`` titled ``heading`` to the next ``<h2>`` (or the end of ``main``)."""
    found = re.search(r"<h2[^>]*>" + re.escape(heading) + r"</h2>", body)
    assert found is not None, f"no section {heading!r}"
    rest = body[found.end() :]
    ends = [i for i in (rest.find("<h2"), rest.find("</main>")) if i >= 0]
    return rest[: min(ends)]


def ladder_block(body: str) -> str:
    """The verdict's reasons as ``_ladder.html`` renders them: from its why-line to its Not credited table."""
    start = body.index('<p id="why">')
    end = body.index("</table>", body.index("<h2>Not credited</h2>", start)) + len("</table>")
    return body[start:end]


def why_line(body: str) -> str:
    """The line under the verdict word that says why, linking to each list."""
    return body[body.index('<p id="why">') :].split("</p>", 1)[0]


def verdict_now(body: str) -> str:
    found = re.search(r"Verdict now: (.+?) \(evaluated", text(body))
    assert found is not None, text(body)[:300]
    return found.group(1)


def restarted(same_job_id: bool = True) -> list[dict[str, Any]]:
    """Job campaign-1 reaches a ready launch and is cancelled; the campaign runs again 5 minutes later —
    under the same job id (a restart no gate judges: INCONCLUSIVE, the first run's output rejected) or
    under a new one (QUALIFIED, the cancelled run's launch rejected as ``killed-run``)."""
    first = [e for e in qualified_entries() if e["name"] in ("campaign-job", "host", "pin", "launch")]
    cancel = {
        "name": "cancel",
        "kind": "job",
        "key": "collector",
        "at": "2026-09-10T10:01:30Z",
        "payload": {
            "job_id": "campaign-1",
            "state": "cancelled",
            "ended_at": "2026-09-10T10:01:30Z",
            "cancelled_by": "SIGINT",
        },
    }
    again = moved([e for e in qualified_entries() if e["name"] not in ("host", "pin")], timedelta(minutes=5))
    for e in again:
        e["name"] = "again-" + e["name"]
        e["refs"] = {rel: "again-" + target for rel, target in e.get("refs", {}).items()}
        if e["kind"] == "job" and not same_job_id:
            e["payload"]["job_id"] = "campaign-2"
    return [*first, cancel, *again]


def assert_shows_the_verdict_now(s: Site, body: str) -> dict[str, Any]:
    """The timeline says what GET /v1/verdict says — the word, every rejected entry with its rule and
    detail, what no gate judges, the failures past the ladder — in the /verdict page's own rendering."""
    v = s.verdict()
    assert verdict_now(body) == v["verdict"]
    assert ladder_block(body) == ladder_block(s.ladder_page())
    rejected = text(section(body, "Rejected evidence"))
    for r in v["rejected"]:
        assert f"{r['entry'][:10]} {r['kind']} {r['rule']} {r['detail']}" in rejected, r
    for u in v["unjudged"]:
        assert u["detail"] in text(section(body, "What no gate judges")), u
    for b in v["failing_beyond_ladder"]:
        row = f"{b['gate']} {b['verdict_if_failed']} {b['reason']}"
        assert row in text(section(body, "Failures past where the ladder stopped")), b
    return v


# --- the regression: INCONCLUSIVE beside "nothing rejected" ---------------------------------------------


def test_timeline_said_nothing_rejected_beside_an_inconclusive_verdict(tmp_path: Path) -> None:
    """Audit 60 f2, home 2: the job cancelled, then started again under the same job id."""
    with site(tmp_path, restarted(same_job_id=True)) as s:
        body = s.timeline()
        v = assert_shows_the_verdict_now(s, body)
    assert v["verdict"] == "INCONCLUSIVE"
    assert "killed-run" in {r["rule"] for r in v["rejected"]}
    [unjudged] = v["unjudged"]
    assert "was started again" in unjudged["detail"]
    assert "nothing rejected" not in body
    # the why-line under the word links to each list
    why = why_line(body)
    assert "Why INCONCLUSIVE: the ladder stopped at gate" in text(why)
    assert 'href="#unjudged"' in why and 'href="#rejected"' in why
    assert 'id="unjudged"' in body and 'id="rejected"' in body
    # the log's own notes keep a heading of their own, and say what they are
    notes = text(section(body, LOG_NOTES))
    assert "no note in the log marks an entry of this page rejected" in notes
    assert "nothing rejected" not in notes


def test_timeline_names_a_job_that_never_ended_as_what_no_gate_judges(tmp_path: Path) -> None:
    """Audit 60 f2, home 1: every gate passed, the job's end never arrived — INCONCLUSIVE, and why."""
    es = [e for e in qualified_entries() if e["name"] != "campaign-done"]
    with site(tmp_path, es) as s:
        body = s.timeline()
        v = assert_shows_the_verdict_now(s, body)
    assert v["verdict"] == "INCONCLUSIVE" and v["rejected"] == []
    assert {g["status"] for g in v["gates"]} == {"passed"}
    [unjudged] = v["unjudged"]
    assert "has no terminal" in unjudged["detail"]
    assert "nothing rejected" not in body
    assert "Why INCONCLUSIVE: every gate passed; what no gate judges (1)" in text(body)
    assert "no entry rejected: why INCONCLUSIVE" in text(section(body, "Rejected evidence"))


def test_timeline_lists_the_killed_run_beside_a_qualified_verdict(tmp_path: Path) -> None:
    """Cancelled, then a new job: QUALIFIED — and the cancelled run's launch listed as killed-run."""
    with site(tmp_path, restarted(same_job_id=False)) as s:
        body = s.timeline()
        v = assert_shows_the_verdict_now(s, body)
    assert v["verdict"] == "QUALIFIED"
    assert "killed-run" in {r["rule"] for r in v["rejected"]}
    assert "nothing rejected" not in body
    assert f"every gate passed; rejected evidence ({len(v['rejected'])})" in text(body)


def test_timeline_of_a_qualified_verdict_with_nothing_rejected_still_says_so(tmp_path: Path) -> None:
    with site(tmp_path, qualified_entries()) as s:
        body = s.timeline()
        v = assert_shows_the_verdict_now(s, body)
    assert v["verdict"] == "QUALIFIED" and v["rejected"] == [] and v["unjudged"] == []
    assert "nothing rejected" in text(section(body, "Rejected evidence"))
    assert "What no gate judges" not in body and "Failures past where the ladder stopped" not in body
    assert text(why_line(body)) == "every gate passed"


def test_timeline_shows_failures_past_where_the_ladder_stopped(tmp_path: Path) -> None:
    """INCONCLUSIVE for a missing host probe, a crash behind it: the failures the ladder did not reach."""
    es = [e for e in failed_campaign() if e["kind"] != "host.probe"]
    with site(tmp_path, es, campaign="shop-a") as s:
        body = s.timeline()
        v = assert_shows_the_verdict_now(s, body)
    assert v["verdict"] == "INCONCLUSIVE"
    beyond = v["failing_beyond_ladder"]
    assert beyond and beyond[0]["gate"] == "runtime-stability"
    assert f"failures past where the ladder stopped ({len(beyond)})" in text(why_line(body))
    assert "nothing rejected" not in body


def test_timeline_of_a_not_qualified_verdict_names_the_failed_gate(tmp_path: Path) -> None:
    """A failed ladder lists nothing past it (the engine judges it failed already): the failed gate says."""
    with site(tmp_path, failed_campaign(), campaign="shop-a") as s:
        body = s.timeline()
        v = assert_shows_the_verdict_now(s, body)
    assert v["verdict"] == "NOT QUALIFIED — RUNTIME RELIABILITY" and v["failing_beyond_ladder"] == []
    why = "Why NOT QUALIFIED — RUNTIME RELIABILITY: the ladder stopped at gate runtime-stability ( failed )"
    assert text(why_line(body)) == why
    assert "nothing rejected" not in body


def test_timeline_escapes_a_rejection_reason_holding_markup(tmp_path: Path) -> None:
    """A supersession's reason is the operator's text: shown as text in the verdict's rejected evidence and
    in the log's notes, never as markup."""
    reason = '<script>alert(1)</script> & "quoted" <b>bold</b>'
    es = qualified_entries()
    es.append(
        {
            "name": "withdraw-benchmark",
            "kind": "supersession",
            "key": "operator",
            "at": "2026-09-10T10:55:00Z",
            "refs": {"supersedes": "benchmark"},
            "payload": {"reason": reason, "correction": "run the benchmark again"},
        }
    )
    with site(tmp_path, es) as s:
        body = s.timeline()
        v = assert_shows_the_verdict_now(s, body)
    [superseded] = [r for r in v["rejected"] if r["rule"] == "superseded"]
    assert reason in superseded["detail"]
    assert "<script>" not in body and "<b>bold</b>" not in body
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#34;quoted&#34; &lt;b&gt;bold&lt;/b&gt;"
    assert escaped in section(body, "Rejected evidence")
    assert escaped in section(body, LOG_NOTES)


# --- paging: every page of the timeline shows the verdict whole -----------------------------------------


def test_a_later_timeline_page_keeps_the_verdicts_rejected_evidence_and_reasons(tmp_path: Path) -> None:
    """Page 2 holds none of the rejected entries: the verdict's lists are the campaign's, shown on every
    page; the log's notes are the page's own (none there)."""
    es = restarted(same_job_id=True)
    last = max(e["at"] for e in es)
    notes = [
        {
            "name": f"filler-{i}",
            "kind": "note",
            "key": "collector",
            "at": last,
            "payload": {"text": f"filler {i}"},
        }
        for i in range(views._PAGE)
    ]
    with site(tmp_path, [*es, *notes]) as s:
        first = s.timeline()
        nxt = re.search(r'<a href="([^"]*)">older entries →</a>', first)
        assert nxt is not None
        r = s.client.get(html.unescape(nxt.group(1)))
        assert r.status_code == 200
        second = r.text
        v = assert_shows_the_verdict_now(s, second)
    assert v["verdict"] == "INCONCLUSIVE" and v["rejected"] and v["unjudged"]
    rows = second.split("<h2>Timeline</h2>", 1)[1]
    assert not any(f'/entries/{r["entry"]}"' in rows for r in v["rejected"])
    assert all(f'/entries/{r["entry"]}"' in first.split("<h2>Timeline</h2>", 1)[1] for r in v["rejected"])
    assert ladder_block(first) == ladder_block(second)
    assert "nothing rejected" not in second
    assert "no note in the log marks an entry of this page rejected" in text(section(second, LOG_NOTES))


def test_a_campaign_whose_verdict_cannot_be_derived_says_so(tmp_path: Path, monkeypatch: Any) -> None:
    """A verdict the server cannot derive is not shown as none: the page says it cannot, and why."""
    from ledger.errors import InputError

    def refuse(*_a: Any, **_k: Any) -> dict[str, Any]:
        raise InputError("the policy <cannot> load")

    with site(tmp_path, qualified_entries()) as s:
        monkeypatch.setattr(views, "_evaluate", refuse)
        body = s.timeline()
    assert "Verdict now: cannot be derived here the policy <cannot> load" in text(body)
    assert "the policy &lt;cannot&gt; load" in body


def test_the_verdict_page_and_a_recorded_verdicts_page_show_the_same_why(tmp_path: Path) -> None:
    """The partial the timeline now includes is the /verdict page's and the recorded verdict's entry
    page's: one copy, the same why-line and lists on each, and one verdict word a page."""
    with site(tmp_path, restarted(same_job_id=True)) as s:
        ladder = s.ladder_page()
        recorded = s.ledger.record_verdict(
            s.ledger.evaluate_verdict({"campaign": s.campaign}), key="reviewer"
        )
        r = s.client.get(f"/entries/{recorded.entry_id}")
        assert r.status_code == 200, r.text
        entry_page = r.text
        body = s.timeline()
    assert 'id="verdict-word">INCONCLUSIVE' in ladder
    for page in (ladder, entry_page, body):
        assert "Why INCONCLUSIVE: the ladder stopped at gate" in text(why_line(page))
        assert "nothing rejected" not in page
        assert "was started again" in text(section(page, "What no gate judges"))
        assert page.count('id="verdict-word"') == 1
    assert ladder_block(entry_page) == ladder_block(ladder)
