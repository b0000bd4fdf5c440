"""What a reviewer reads first about an entry, a subject and a pair of verdicts (from their entries)."""

from __future__ import annotations

import re
from html import escape
from typing import Any

from markupsafe import Markup

from ledger.api.charts import bar_chart, line_chart
from ledger.api.pages import verdict_class
from ledger.policy.verdict import evaluated_subject
from ledger.service import Ledger, LoggedEntry

__all__ = [
    "benchmark_levels",
    "diff_verdicts",
    "entry_summary",
    "log_lines",
    "previous_verdict",
    "row_note",
    "subject_charts",
]

_FIGURE = re.compile(r"^(?P<metric>[a-z_]+)(?:\.(?P<stat>[a-z0-9]+))?@c(?P<level>\d+)$")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _size(n: Any) -> str:
    v = _num(n)
    if v is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v} B"


def row_note(e: LoggedEntry) -> str:
    """One line for a timeline row: exit code and signature, probe result and latency, gate and status …"""
    p = e.statement.payload
    k = e.kind
    if k == "engine.launch":
        parts = [f"attempt {p.get('attempt', 1)}", "ready" if p.get("ready") else "never ready"]
        if p.get("time_to_ready_s") is not None:
            parts.append(f"ready in {p['time_to_ready_s']} s")
        if p.get("exit_code") is not None:
            parts.append(f"exit {p['exit_code']}")
        if p.get("signal") is not None:
            parts.append(f"signal {p['signal']}")
        if p.get("failure_signature"):
            parts.append(f"signature {p['failure_signature']}")
        return " · ".join(parts)
    if k == "health.probe":
        parts = [str(p.get("check", "health")), "ok" if p.get("ok") else "FAILED"]
        if p.get("latency_ms") is not None:
            parts.append(f"{p['latency_ms']} ms")
        if p.get("count") is not None:
            parts.append(f"{p['count']} requests")
        if p.get("error"):
            parts.append(str(p["error"]))
        return " · ".join(parts)
    if k == "gate.result":
        return f"gate {p.get('gate')}: {p.get('status')}" + (f" — {p['reason']}" if p.get("reason") else "")
    if k == "verdict":
        return str(p.get("verdict", ""))
    if k == "host.probe":
        gpus = p.get("gpus") or []
        return f"{p.get('hostname', '')} · {p.get('os', '')} · {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
    if k == "model.pin":
        files = p.get("files") or []
        return f"{len(files)} files · {_size(p.get('total_size'))} · verification {p.get('verification')}"
    if k == "job":
        return f"job {p.get('state')}" + (
            f" (exit {p['exit_code']})" if p.get("exit_code") is not None else ""
        )
    if k == "review":
        return f"review {p.get('result')}" + (f": {p['summary']}" if p.get("summary") else "")
    if k == "acceptance":
        return f"{p.get('decision')}: {p.get('reason', '')}"
    if k == "kernel.log":
        return f"{len(p.get('events') or [])} kernel events"
    if k == "note":
        return str(p.get("text", ""))[:200]
    if k == "supersession":
        return f"supersedes: {p.get('reason', '')}"
    return ""


def benchmark_levels(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-level table of a benchmark gate result, from the harness's flat ``metric.stat@cN`` figures."""
    bounds = payload.get("bounds")
    figures = payload.get("figures")  # the gate.result's own figures; older results kept them in bounds
    if not isinstance(figures, dict) and isinstance(bounds, dict):
        figures = bounds.get("figures")
    if not isinstance(figures, dict):
        return []
    levels: dict[int, dict[str, Any]] = {}
    for name, value in figures.items():
        m = _FIGURE.match(str(name))
        if m is None:
            continue
        row = levels.setdefault(int(m["level"]), {"level": int(m["level"])})
        row[f"{m['metric']}.{m['stat']}" if m["stat"] else m["metric"]] = value
    return [levels[k] for k in sorted(levels)]


def _phases(p: dict[str, Any]) -> list[tuple[str, Any]]:
    ph = p.get("phases")
    if not isinstance(ph, dict):
        return []
    return [(k, v) for k, v in sorted(ph.items()) if not k.startswith("t_")]


def entry_summary(e: LoggedEntry) -> dict[str, Any]:
    """The facts of an entry by kind, for the top of its page (the raw payload follows below)."""
    p = e.statement.payload
    out: dict[str, Any] = {"kind": e.kind, "note": row_note(e)}
    if e.kind == "engine.launch":
        out["facts"] = [
            ("engine", p.get("engine")),
            ("attempt", p.get("attempt")),
            ("ready", "yes" if p.get("ready") else "no"),
            ("ready endpoint", p.get("ready_endpoint")),
            ("time to ready", f"{p['time_to_ready_s']} s" if p.get("time_to_ready_s") is not None else None),
            ("exit code", p.get("exit_code")),
            ("signal", p.get("signal")),
            ("lease expired", "yes" if p.get("lease_expired") else None),
            ("failure signature", p.get("failure_signature")),
            ("failure line", p.get("failure_detail")),
            ("stop reason", (p.get("details") or {}).get("stop_reason")),
        ]
        out["phases"] = _phases(p)
    elif e.kind == "health.probe":
        out["facts"] = [
            ("check", p.get("check")),
            ("result", "ok" if p.get("ok") else "FAILED"),
            ("HTTP status", p.get("http_status")),
            ("latency", f"{p['latency_ms']} ms" if p.get("latency_ms") is not None else None),
            ("model", p.get("model_identity")),
            ("expected", p.get("expected")),
            ("answer", p.get("text")),
            ("requests", p.get("count")),
            ("error", p.get("error")),
        ]
        lat = [v for v in (p.get("latencies_ms") or []) if _num(v) is not None]
        if lat:
            out["chart"] = line_chart(
                "Sequential request latency", [("latency", lat)], y_label="ms", x_label="request"
            )
    elif e.kind == "model.pin":
        out["facts"] = [
            ("repository", p.get("repo_id")),
            ("revision", p.get("revision")),
            ("root", p.get("root")),
            ("total size", _size(p.get("total_size"))),
            ("verification", p.get("verification")),
        ]
        out["files"] = [
            {
                "path": f.get("path"),
                "size": f.get("size"),
                "human": _size(f.get("size")),
                "sha256": f.get("sha256"),
                "blake3": f.get("blake3"),
            }
            for f in p.get("files") or []
        ]
    elif e.kind == "host.probe":
        out["facts"] = _host_facts(p)
        out["gpus"] = p.get("gpus") or []
    elif e.kind == "gate.result":
        out["facts"] = [("gate", p.get("gate")), ("status", p.get("status")), ("reason", p.get("reason"))]
        out["counts"] = sorted((p.get("counts") or {}).items())
        if p.get("gate") == "benchmark":
            levels = benchmark_levels(p)
            out["levels"] = levels
            if levels:
                out["charts"] = _benchmark_charts(levels)
    elif e.kind == "verdict":
        out["facts"] = [("verdict", p.get("verdict")), ("status", p.get("status"))]
    out["facts"] = [(k, v) for k, v in out.get("facts", []) if v is not None and v != ""]
    return out


def _host_facts(p: dict[str, Any]) -> list[tuple[str, Any]]:
    gpus = p.get("gpus") or []
    drivers = sorted({str(g.get("driver") or g.get("driver_version") or "") for g in gpus} - {""})
    return [
        ("hostname", p.get("hostname")),
        ("OS", p.get("os")),
        ("kernel", p.get("kernel")),
        ("architecture", p.get("arch")),
        ("WSL2", "yes" if p.get("wsl2") else None),
        ("CPUs", p.get("cpu_count")),
        (
            "memory",
            _size((p.get("memory_total_mib") or 0) * 1024 * 1024) if p.get("memory_total_mib") else None,
        ),
        (
            "GPUs",
            f"{len(gpus)} (via {p.get('gpu_source', 'none')})" if gpus else (p.get("gpu_note") or "none"),
        ),
        ("driver", ", ".join(drivers) or None),
    ]


def host_facts(e: LoggedEntry) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in _host_facts(e.statement.payload) if v is not None and v != ""]


def _benchmark_charts(levels: list[dict[str, Any]]) -> list[Markup]:
    names = [f"c{r['level']}" for r in levels]
    ttft = bar_chart(
        "TTFT per concurrency level",
        [
            (n, [_num(r.get("ttft_ms.p50")), _num(r.get("ttft_ms.p99"))])
            for n, r in zip(names, levels, strict=True)
        ],
        series=["p50", "p99"],
        y_label="ms",
    )
    tput = bar_chart(
        "Output throughput per concurrency level",
        [(n, [_num(r.get("output_throughput"))]) for n, r in zip(names, levels, strict=True)],
        y_label="tokens/s",
    )
    return [c for c in (ttft, tput) if c]


def _verdict_strip(verdicts: list[LoggedEntry]) -> Markup:
    """Verdicts over time: one coloured, labelled cell per recorded verdict, oldest first."""
    if not verdicts:
        return Markup("")
    w, cell, h = 640, max(40.0, min(120.0, 600 / len(verdicts))), 96
    colour = {"v-qualified": "#0a7d32", "v-inconclusive": "#b58900", "v-not-qualified": "#b3261e"}
    parts = [
        f'<svg class="chart" role="img" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" '
        f'height="{h}" aria-label="Verdicts over time"><title>Verdicts over time</title>',
        '<text x="4" y="14" font-size="13" font-weight="600">Verdicts over time</text>',
    ]
    for i, v in enumerate(verdicts[-int(600 // cell) :]):
        word = str(v.statement.payload.get("verdict", ""))
        x = 4 + i * cell
        fill = colour.get(verdict_class(word), "#66707f")
        short = word.replace("NOT QUALIFIED — ", "NQ: ")
        parts.append(
            f'<rect x="{x:.1f}" y="22" width="{cell - 4:.1f}" height="40" fill="{fill}">'
            f"<title>{escape(word)} at {escape(v.logged_at)}</title></rect>"
            f'<text x="{x + 2:.1f}" y="46" font-size="9" fill="#fff">{escape(short[:18])}</text>'
            f'<text x="{x:.1f}" y="78" font-size="9">{escape(v.logged_at[5:16])}</text>'
        )
    parts.append("</svg>")
    # the verdict words and times are escaped above
    return Markup("".join(parts))  # noqa: S704


def subject_charts(entries: list[LoggedEntry], verdicts: list[LoggedEntry]) -> list[Markup]:
    charts: list[Markup] = []
    launches = [e for e in entries if e.kind == "engine.launch"]
    ttr = [_num(e.statement.payload.get("time_to_ready_s")) for e in launches]
    if any(v is not None for v in ttr):
        charts.append(
            bar_chart(
                "Time to ready per attempt",
                [
                    (f"attempt {e.statement.payload.get('attempt', i + 1)}", [v])
                    for i, (e, v) in enumerate(zip(launches, ttr, strict=True))
                ],
                y_label="seconds",
            )
        )
    for e in entries:
        p = e.statement.payload
        if e.kind == "health.probe" and p.get("check") == "sequential" and p.get("latencies_ms"):
            lat = [_num(v) for v in p["latencies_ms"]]
            charts.append(
                line_chart("Sequential request latency", [("latency", lat)], y_label="ms", x_label="request")
            )
        if e.kind == "gate.result" and p.get("gate") == "benchmark":
            levels = benchmark_levels(p)
            if levels:
                charts.extend(_benchmark_charts(levels))
    strip = _verdict_strip(verdicts)
    if strip:
        charts.append(strip)
    return [c for c in charts if c]


def diff_verdicts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What changed from verdict ``a`` to verdict ``b``: the word, each gate's status, the evidence."""
    ga = {g["name"]: g for g in a.get("gates", [])}
    gb = {g["name"]: g for g in b.get("gates", [])}
    gates = []
    for name in [*gb, *(n for n in ga if n not in gb)]:
        x, y = ga.get(name, {}), gb.get(name, {})
        gates.append(
            {
                "name": name,
                "before": x.get("status", "absent"),
                "after": y.get("status", "absent"),
                "reason_before": x.get("reason", ""),
                "reason_after": y.get("reason", ""),
                "flipped": x.get("status") != y.get("status"),
            }
        )
    rej_a = {r["entry"]: r for r in a.get("rejected", [])}
    rej_b = {r["entry"]: r for r in b.get("rejected", [])}
    used_a, used_b = set(a.get("used", [])), set(b.get("used", []))
    return {
        "verdict_before": a.get("verdict"),
        "verdict_after": b.get("verdict"),
        "verdict_flipped": a.get("verdict") != b.get("verdict"),
        "gates": gates,
        "newly_rejected": [r for e, r in rej_b.items() if e not in rej_a],
        "no_longer_rejected": [r for e, r in rej_a.items() if e not in rej_b],
        "used_gained": sorted(used_b - used_a),
        "used_lost": sorted(used_a - used_b),
        "policy_changed": a.get("policy", {}).get("digest") != b.get("policy", {}).get("digest"),
    }


def previous_verdict(ledger: Ledger, entry: LoggedEntry) -> LoggedEntry | None:
    """The verdict recorded for the same subject just before this one (to diff against)."""
    subject = evaluated_subject(entry.statement.payload) or dict(entry.statement.subject)
    earlier = [
        v
        for v in ledger.query(subject=dict(subject), kind="verdict", descending=True, limit=50)
        if v.seq < entry.seq
    ]
    return earlier[0] if earlier else None


def log_lines(text: str, q: str, failures: list[str]) -> dict[str, Any]:
    """Numbered lines with the search hits and the failure-signature lines marked."""
    lines = text.splitlines()
    needle = q.lower()
    out = []
    hits = 0
    failure_at: list[int] = []
    for i, line in enumerate(lines, 1):
        hit = bool(needle) and needle in line.lower()
        failed = any(f and (f in line or line.strip() == f) for f in failures)
        hits += hit
        if failed:
            failure_at.append(i)
        out.append({"n": i, "text": line, "hit": hit, "failure": failed})
    return {"lines": out, "hits": hits, "failure_at": failure_at, "count": len(lines)}
