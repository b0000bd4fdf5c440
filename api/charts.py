"""Small server-side SVG charts for the reviewer pages: readable without JavaScript, no external assets.

Each chart is inline SVG with a ``<title>`` and a visible data table fallback in the page; every label is
escaped. Values that are missing are left out (never drawn as zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from markupsafe import Markup

__all__ = ["bar_chart", "line_chart"]

_W, _H = 640, 240
_L, _R, _T, _B = 56, 16, 28, 40  # margins: axis labels left and bottom, title on top
_COLOURS = ("#2f6fdf", "#d9822b", "#0a7d32", "#b3261e", "#7b3fbf")


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _frame(
    title: str, y_label: str, y_max: float, body: list[str], x_labels: list[tuple[float, str]]
) -> Markup:
    plot_h = _H - _T - _B
    parts = [
        f'<svg class="chart" role="img" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" '
        f'width="{_W}" height="{_H}" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{_L}" y="16" font-size="13" font-weight="600">{escape(title)}</text>',
        f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_H - _B}" stroke="#66707f"/>',
        f'<line x1="{_L}" y1="{_H - _B}" x2="{_W - _R}" y2="{_H - _B}" stroke="#66707f"/>',
        f'<text x="12" y="{_T + plot_h / 2}" font-size="11" transform="rotate(-90 12 {_T + plot_h / 2})" '
        f'text-anchor="middle">{escape(y_label)}</text>',
    ]
    for i in range(5):
        v = y_max * i / 4
        y = _H - _B - plot_h * i / 4
        parts.append(f'<line x1="{_L}" y1="{y:.1f}" x2="{_W - _R}" y2="{y:.1f}" stroke="#e1e4ea"/>')
        parts.append(f'<text x="{_L - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{_fmt(v)}</text>')
    for x, label in x_labels:
        parts.append(
            f'<text x="{x:.1f}" y="{_H - _B + 14}" font-size="10" text-anchor="middle">{escape(label)}</text>'
        )
    parts.extend(body)
    parts.append("</svg>")
    # every text that came from evidence went through html.escape above; numbers are formatted here
    return Markup("".join(parts))  # noqa: S704


def line_chart(
    title: str, series: Sequence[tuple[str, Sequence[float | None]]], *, y_label: str = "", x_label: str = ""
) -> Markup:
    """One line per series over the index 1..n (e.g. request number); points are drawn and labelled."""
    values = [v for _, ys in series for v in ys if v is not None]
    n = max((len(ys) for _, ys in series), default=0)
    if not values or n == 0:
        return Markup("")
    y_max = max(values) * 1.1 or 1.0
    plot_w, plot_h = _W - _L - _R, _H - _T - _B

    def xy(i: int, v: float) -> tuple[float, float]:
        x = _L + (plot_w * (i + 0.5) / n)
        return x, _H - _B - plot_h * v / y_max

    body: list[str] = []
    for k, (name, ys) in enumerate(series):
        colour = _COLOURS[k % len(_COLOURS)]
        pts = [xy(i, v) for i, v in enumerate(ys) if v is not None]
        if len(pts) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            body.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for (x, y), v in zip(pts, [v for v in ys if v is not None], strict=True):
            body.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"><title>{_fmt(v)}</title></circle>'
            )
        if len(series) > 1:
            body.append(
                f'<text x="{_W - _R - 4}" y="{_T + 12 + 13 * k}" font-size="11" text-anchor="end" '
                f'fill="{colour}">{escape(name)}</text>'
            )
    step = max(1, n // 10)
    labels = [(xy(i, 0)[0], str(i + 1)) for i in range(0, n, step)]
    if x_label:
        body.append(
            f'<text x="{_L + plot_w / 2}" y="{_H - 6}" font-size="11" text-anchor="middle">'
            f"{escape(x_label)}</text>"
        )
    return _frame(title, y_label, y_max, body, labels)


def bar_chart(
    title: str,
    groups: Sequence[tuple[str, Sequence[float | None]]],
    *,
    series: Sequence[str] = (),
    y_label: str = "",
    classes: Sequence[str] = (),
) -> Markup:
    """Grouped bars: one group per label (e.g. a concurrency level), one bar per series value."""
    values = [v for _, vs in groups for v in vs if v is not None]
    if not values:
        return Markup("")
    y_max = max(values) * 1.15 or 1.0
    plot_w, plot_h = _W - _L - _R, _H - _T - _B
    per = max(len(vs) for _, vs in groups) or 1
    gw = plot_w / len(groups)
    bw = gw * 0.7 / per
    body: list[str] = []
    labels: list[tuple[float, str]] = []
    for g, (label, vs) in enumerate(groups):
        x0 = _L + gw * g + gw * 0.15
        labels.append((x0 + gw * 0.35, label))
        for k, v in enumerate(vs):
            if v is None:
                continue
            h = plot_h * v / y_max
            colour = _COLOURS[k % len(_COLOURS)]
            cls = f' class="{escape(classes[g])}"' if g < len(classes) else ""
            body.append(
                f'<rect{cls} x="{x0 + bw * k:.1f}" y="{_H - _B - h:.1f}" width="{bw - 2:.1f}" '
                f'height="{h:.1f}" '
                f'fill="{colour}"><title>{escape(label)}: {_fmt(v)}</title></rect>'
            )
            body.append(
                f'<text x="{x0 + bw * k + bw / 2:.1f}" y="{_H - _B - h - 3:.1f}" font-size="10" '
                f'text-anchor="middle">{_fmt(v)}</text>'
            )
    for k, name in enumerate(series):
        body.append(
            f'<text x="{_W - _R - 4}" y="{_T + 12 + 13 * k}" font-size="11" text-anchor="end" '
            f'fill="{_COLOURS[k % len(_COLOURS)]}">{escape(name)}</text>'
        )
    return _frame(title, y_label, y_max, body, labels)
