"""Line charts as inline SVG text: the static page embeds them, so it needs no script and no network.

Coordinates are computed here; the browser only draws. Every text that reaches the SVG goes
through :func:`html.escape`, since method names come from submitters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22")
WIDTH, HEIGHT = 560, 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 170, 30, 46


@dataclass(frozen=True)
class Series:
    """Points ``(x, y, error)`` (error: half-length of the error bar, or None) drawn as one line."""

    name: str
    points: tuple[tuple[float, float, float | None], ...]
    color: str
    dashed: bool = False
    markers: bool = True
    full_width: bool = False
    """A level (one y value) drawn across the whole plot, whatever the x range: its x values are ignored."""


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        low, high = low - 0.5, high + 0.5
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def line_chart(title: str, series: list[Series], x_label: str, y_label: str, log_x: bool = False,
               x_range: tuple[float, float] | None = None, y_range: tuple[float, float] | None = None) -> str:
    """An SVG ``<svg>`` element: one line per series, error bars, axes with ticks, a legend on the right."""
    xs = [p[0] for s in series if not s.full_width for p in s.points]
    ys = [v for s in series for p in s.points for v in
          ((p[1],) if p[2] is None else (p[1] - p[2], p[1] + p[2]))]
    x_low, x_high = x_range or (min(xs), max(xs))
    y_low, y_high = y_range or (min(ys), max(ys))
    if y_range is None:
        pad = 0.08 * (y_high - y_low or abs(y_high) or 1.0)
        y_low, y_high = y_low - pad, y_high + pad
    transform = math.log10 if log_x else float
    tx_low, tx_high = transform(x_low), transform(x_high)
    if tx_high == tx_low:
        tx_low, tx_high = tx_low - 0.5, tx_high + 0.5
    plot_w, plot_h = WIDTH - MARGIN_LEFT - MARGIN_RIGHT, HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def px(x: float) -> float:
        return MARGIN_LEFT + (transform(x) - tx_low) / (tx_high - tx_low) * plot_w

    def py(y: float) -> float:
        return MARGIN_TOP + (y_high - y) / (y_high - y_low) * plot_h

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
              f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">'),
             f'<text x="{MARGIN_LEFT}" y="18" class="title">{escape(title)}</text>',
             f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    x_ticks = sorted(set(xs)) if log_x else _nice_ticks(x_low, x_high)
    for x in x_ticks:
        parts.append(f'<line x1="{px(x):.1f}" y1="{MARGIN_TOP + plot_h}" x2="{px(x):.1f}" '
                     f'y2="{MARGIN_TOP + plot_h + 4}" class="axis"/>'
                     f'<text x="{px(x):.1f}" y="{MARGIN_TOP + plot_h + 16}" class="tick" '
                     f'text-anchor="middle">{x:g}</text>')
    for y in _nice_ticks(y_low, y_high):
        parts.append(f'<line x1="{MARGIN_LEFT}" y1="{py(y):.1f}" x2="{MARGIN_LEFT + plot_w}" y2="{py(y):.1f}" '
                     f'class="grid"/><text x="{MARGIN_LEFT - 6}" y="{py(y) + 4:.1f}" class="tick" '
                     f'text-anchor="end">{y:.4g}</text>')
    parts.append(f'<text x="{MARGIN_LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" class="label" '
                 f'text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(14 {MARGIN_TOP + plot_h / 2:.1f}) rotate(-90)" class="label" '
                 f'text-anchor="middle">{escape(y_label)}</text>')
    for index, s in enumerate(series):
        if s.full_width:
            level = py(s.points[0][1])
            path = f"{MARGIN_LEFT},{level:.1f} {MARGIN_LEFT + plot_w},{level:.1f}"
        else:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in s.points)
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        parts.append(f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"{dash}>'
                     f"<title>{escape(s.name)}</title></polyline>")
        for x, y, error in s.points:
            if error is not None:
                parts.append(f'<line x1="{px(x):.1f}" y1="{py(y - error):.1f}" x2="{px(x):.1f}" '
                             f'y2="{py(y + error):.1f}" stroke="{s.color}"/>')
            if s.markers:
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{s.color}"/>')
        legend_y = MARGIN_TOP + 14 + 18 * index
        parts.append(f'<line x1="{WIDTH - MARGIN_RIGHT + 12}" y1="{legend_y - 4}" x2="{WIDTH - MARGIN_RIGHT + 32}" '
                     f'y2="{legend_y - 4}" stroke="{s.color}" stroke-width="2"{dash}/>'
                     f'<text x="{WIDTH - MARGIN_RIGHT + 38}" y="{legend_y}" class="legend">{escape(s.name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def horizontal(name: str, y: float, colour: str = "#555555") -> Series:
    """A dashed horizontal line across the plot at ``y`` (e.g. the reference's noise floor)."""
    return Series(name, ((0.0, y, None),), colour, dashed=True, markers=False, full_width=True)


def diagonal(name: str = "calibrated") -> Series:
    return Series(name, ((0.0, 0.0, None), (1.0, 1.0, None)), "#555555", dashed=True, markers=False)
