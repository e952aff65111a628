"""Charts as inline SVG strings (no script, no external reference: they render from disk)."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

__all__ = ["bar_chart", "histogram"]

_W = 520
_BAR_H = 18
_LABEL_W = 190
_PALETTE = ("#3b6fb6", "#c0504d", "#9bbb59", "#8064a2", "#4bacc6", "#f79646", "#7f7f7f")


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def bar_chart(
    items: Sequence[tuple[str, float, str]],
    *,
    title: str,
    maximum: float | None = None,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    color: str | None = None,
) -> str:
    """Horizontal bars: ``items`` are (label, value, note shown after the value)."""
    if not items:
        return f'<figure class="chart"><figcaption>{_e(title)}</figcaption><p class="muted">no data</p></figure>'
    top = maximum if maximum is not None else max((v for _, v, _ in items), default=1.0) or 1.0
    span = _W - _LABEL_W - 120
    h = len(items) * (_BAR_H + 6) + 8
    parts = [
        f'<svg class="chart-svg" role="img" aria-label="{_e(title)}" width="{_W}" height="{h}" viewBox="0 0 {_W} {h}">'
    ]
    for i, (label, value, note) in enumerate(items):
        y = 4 + i * (_BAR_H + 6)
        w = max(0.0, min(1.0, value / top)) * span if top else 0.0
        fill = color or _PALETTE[i % len(_PALETTE)]
        short = label if len(label) <= 28 else label[:27] + "…"
        parts.append(
            f'<g class="bar" data-label="{_e(label)}" data-value="{value:g}">'
            f"<title>{_e(label)}: {_e(fmt(value))} {_e(note)}</title>"
            f'<text x="{_LABEL_W - 6}" y="{y + 13}" text-anchor="end">{_e(short)}</text>'
            f'<rect x="{_LABEL_W}" y="{y}" width="{w:.1f}" height="{_BAR_H}" fill="{fill}"></rect>'
            f'<text x="{_LABEL_W + w + 4:.1f}" y="{y + 13}">{_e(fmt(value))} {_e(note)}</text></g>'
        )
    parts.append("</svg>")
    return f'<figure class="chart"><figcaption>{_e(title)}</figcaption>{"".join(parts)}</figure>'


def histogram(values: Sequence[float], *, title: str, unit: str, bins: int = 20) -> str:
    """A distribution: ``bins`` equal-width bins (log-spaced when the values span > 2 decades)."""
    if not values:
        return f'<figure class="chart"><figcaption>{_e(title)}</figcaption><p class="muted">no data</p></figure>'
    lo, hi = min(values), max(values)
    log = lo > 0 and hi / lo > 100
    if log:
        a, b = math.log10(lo), math.log10(hi)
    else:
        a, b = lo, hi
    width = (b - a) / bins or 1.0
    counts = [0] * bins
    for v in values:
        x = math.log10(v) if log else v
        counts[min(bins - 1, int((x - a) / width))] += 1
    top = max(counts)
    h, bottom = 150, 20
    bw = (_W - 60) / bins
    parts = [
        f'<svg class="chart-svg" role="img" aria-label="{_e(title)}" width="{_W}" height="{h + bottom}" '
        f'viewBox="0 0 {_W} {h + bottom}">'
    ]
    for i, c in enumerate(counts):
        edge0 = a + i * width
        edge1 = edge0 + width
        if log:
            edge0, edge1 = 10**edge0, 10**edge1
        bh = (c / top) * (h - 10) if top else 0
        parts.append(
            f'<rect x="{40 + i * bw:.1f}" y="{h - bh:.1f}" width="{bw - 1:.1f}" height="{bh:.1f}" fill="#3b6fb6">'
            f"<title>{edge0:.4g}–{edge1:.4g} {_e(unit)}: {c}</title></rect>"
        )
    parts.append(f'<text x="40" y="{h + 15}">{lo:.4g} {_e(unit)}</text>')
    parts.append(
        f'<text x="{_W - 20}" y="{h + 15}" text-anchor="end">{hi:.4g} {_e(unit)}{" (log)" if log else ""}</text>'
    )
    parts.append(f'<text x="36" y="12" text-anchor="end">{top}</text>')
    parts.append("</svg>")
    n = len(values)
    srt = sorted(values)
    median = srt[n // 2] if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2
    caption = f"{_e(title)} — n={n}, median {median:.4g} {_e(unit)}, max {hi:.4g} {_e(unit)}"
    return f'<figure class="chart"><figcaption>{caption}</figcaption>{"".join(parts)}</figure>'
