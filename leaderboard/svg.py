"""Line charts as inline SVG text: the static page embeds them, so it needs no script and no network.

Coordinates are computed here; the browser only draws. Every text that reaches the SVG goes
through :func:`escape` (printable, then HTML-escaped), since method names come from submitters.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from html import escape as html_escape

PALETTE = ("#332288", "#cc6677", "#117733", "#88ccee", "#882255", "#ddcc77", "#44aa99", "#aa4499", "#999933")
"""Paul Tol's "muted" qualitative scheme (Tol 2021, SRON/EPS/TN/09-002: indigo, rose, green, cyan, wine, sand, teal,
purple, olive; its pale grey, meant for missing data, left out), whose colours stay distinct to colour-blind readers.
No colour-blind-safe qualitative scheme has more than these 9 colours, so a series is told apart by its colour and
its marker shape together (:func:`series_style`), and named in the legend and each tooltip."""
MARKER_CORNERS = {"square": ((-3, -3), (3, -3), (3, 3), (-3, 3)), "triangle": ((0, -4), (3.5, 3), (-3.5, 3)),
                  "diamond": ((0, -4), (4, 0), (0, 4), (-4, 0)), "triangle-down": ((0, 4), (3.5, -3), (-3.5, -3))}
"""Polygon markers, as corners around the point (pixels); circles are drawn as circles."""
MARKERS = ("circle", *MARKER_CORNERS)
"""Five shapes: a number of shapes prime to the palette's 9 colours, so that the places 0 to 44 each get a (colour,
shape) pair of their own (:func:`series_style`)."""
DISTINCT_STYLES = len(PALETTE) * len(MARKERS)
LINE_PATTERNS = (None, "2 3", "9 3 2 3")
"""Stroke dash arrays (None: solid) that tell apart series past the :data:`DISTINCT_STYLES` (colour, shape) pairs;
the dashed "6 4" of reference lines (noise floor, diagonal) is not among them."""
EMPHASIS_WIDTH, LINE_WIDTH = 3.5, 2
"""Stroke widths of an emphasised series (the user's own entry, :class:`Style`) and of any other."""
EMPHASIS_SCALE, EMPHASIS_OUTLINE = 1.5, "#000000"
"""An emphasised series' markers are this much larger and outlined in this colour."""
WIDTH, HEIGHT = 560, 320
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 64, 170, 30, 46
TICK_CHAR_WIDTH = 7.0
"""Room taken by one character of an 11 px tick label: digits are 6 to 6.5 px wide in common sans-serif fonts."""
TICK_LABEL_GAP = 6.0
TICK_ROW_HEIGHT = 13
LOG_SCALE_SPAN = 10.0
"""``y_scale="auto"`` draws a log y axis when the plotted values are positive and the largest is more than this
many times the smallest: a linear axis would flatten the small values (those near the noise floor) onto one line."""
LOG_TICK_STEPS = ((1, 2, 5), (1, 3), (1,))
"""Ticks within each decade of a log axis, the first that gives at most ``MAX_LOG_TICKS`` ticks."""
MAX_LOG_TICKS = 9
LEGEND_ROW_HEIGHT = 15
"""Pixels per legend entry (11 px text and its marker): 18 entries (say 15 series, the noise floor and two more) fit
beside the plot, and a chart of more grows downwards to hold its legend."""
LEGEND_CHARS = 22
"""Legend entries longer than this are cut (the whole name is in their tooltip): the legend column is 170 px."""


def escape(text: str) -> str:
    """Text for the SVG: every character that is not printable (terminal escapes, bidirectional overrides that
    would reorder the legend) as a space, then HTML-escaped."""
    return html_escape("".join(ch if ch.isprintable() else " " for ch in str(text)))


@dataclass(frozen=True)
class Style:
    """How a series is drawn: its colour, line pattern (an SVG stroke-dasharray; None: solid), marker shape (one of
    :data:`MARKERS`; None: no markers), and whether it is emphasised (a thicker line, larger outlined markers and a
    bold legend entry: the user's own entry among shipped ones)."""

    color: str
    dash: str | None = None
    marker: str | None = "circle"
    emphasised: bool = False


REFERENCE_STYLE = Style("#555555", "6 4", None)
"""Reference lines (the noise floor, the calibrated diagonal): grey, dashed, no markers."""


@dataclass(frozen=True)
class Series:
    """Points ``(x, y, low, high)`` (the error bar's ends, or None and None for none) drawn as one line."""

    name: str
    points: tuple[tuple[float, float, float | None, float | None], ...]
    style: Style
    full_width: bool = False
    """A level (one y value) drawn across the whole plot, whatever the x range: its x values are ignored."""


def series_style(place: int, emphasised: bool = False) -> Style:
    """The look of the series at ``place`` (0, 1, ...): colour ``place`` mod 9 and marker shape ``place`` mod 5, so
    that neighbouring places differ in both and the first :data:`DISTINCT_STYLES` (45) places in at least one; past
    them a line pattern of its own."""
    pattern = LINE_PATTERNS[place // DISTINCT_STYLES % len(LINE_PATTERNS)]
    return Style(PALETTE[place % len(PALETTE)], pattern, MARKERS[place % len(MARKERS)], emphasised)


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        low, high = low - 0.5, high + 0.5
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step - 1e-9) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _log_ticks(low: float, high: float) -> list[float]:
    """Ticks at 1, 2 and 5 times each power of ten in [low, high] (fewer per decade when the span is wide), each a
    round number that reads as written (``0.05``, ``0.1``, ``1``), at least two."""
    for steps in LOG_TICK_STEPS:
        powers = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        ticks = [float(f"{step}e{power}") for power in powers for step in steps]
        ticks = [tick for tick in ticks if low * (1 - 1e-9) <= tick <= high * (1 + 1e-9)]
        if len(ticks) <= MAX_LOG_TICKS:
            break
    return ticks if len(ticks) >= 2 else [low, high]


def log_scale_wanted(values: list[float]) -> bool:
    """Whether ``y_scale="auto"`` draws ``values`` on a log axis (:data:`LOG_SCALE_SPAN`)."""
    return bool(values) and min(values) > 0 and max(values) > LOG_SCALE_SPAN * min(values)


def x_tick_rows(positions: list[float], labels: list[str]) -> list[int]:
    """The row (0: next to the axis) of each x tick label, for ticks in ascending ``positions`` (pixels): each label
    takes the first row where it clears the last label placed there, so every tick keeps its label and no two
    labels overlap, however close the ticks."""
    row_ends: list[float] = []  # where the last label of each row ends
    rows = []
    for x, text in zip(positions, labels):
        half = len(text) * TICK_CHAR_WIDTH / 2
        row = next((r for r, end in enumerate(row_ends) if x - half >= end + TICK_LABEL_GAP), len(row_ends))
        if row == len(row_ends):
            row_ends.append(0.0)
        row_ends[row] = x + half
        rows.append(row)
    return rows


def _marker(style: Style, x: float, y: float) -> str:
    scale = EMPHASIS_SCALE if style.emphasised else 1.0
    outline = f' stroke="{EMPHASIS_OUTLINE}" stroke-width="1"' if style.emphasised else ""
    if style.marker == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{3 * scale:g}" fill="{style.color}"{outline}/>'
    points = " ".join(f"{x + dx * scale:.1f},{y + dy * scale:.1f}" for dx, dy in MARKER_CORNERS[style.marker])
    return f'<polygon points="{points}" fill="{style.color}"{outline}/>'


def _shortened(name: str) -> str:
    return name if len(name) <= LEGEND_CHARS else name[:LEGEND_CHARS - 1] + "\u2026"


OFF_SCALE_MADS = 10.0
"""A point more than this many median absolute deviations from the median of the other series' points at its x
is off the scale of a linear chart whose range is chosen for it (:func:`off_scale`)."""


def off_scale(series: list[Series]) -> set[tuple[int, int]]:
    """The points, as (series index, point index), far from the rest at their x: among the points of the series
    that are not reference lines at one x (three or more), those more than :data:`OFF_SCALE_MADS` median absolute
    deviations from their median. One method far off then does not squash the others into a sliver of the plot."""
    at_x: dict[float, list[tuple[tuple[int, int], float]]] = {}
    for index, s in enumerate(series):
        if not s.full_width:
            for number, point in enumerate(s.points):
                at_x.setdefault(point[0], []).append(((index, number), point[1]))
    found = set()
    for points in at_x.values():
        if len(points) < 3:
            continue
        values = [y for _, y in points]
        median = statistics.median(values)
        spread = statistics.median(abs(y - median) for y in values)
        found |= {key for key, y in points if spread > 0 and abs(y - median) > OFF_SCALE_MADS * spread}
    return found


def _off_scale_arrow(x: float, y: float, up: bool, color: str, text: str) -> str:
    """A triangle inside the plot, its tip on the edge ``y`` the point lies beyond, its value in its title."""
    tip, base = (y, y + 8) if up else (y, y - 8)
    return (f'<polygon points="{x:.1f},{tip:.1f} {x - 5:.1f},{base:.1f} {x + 5:.1f},{base:.1f}" fill="{color}" '
            f'class="off-scale"><title>{escape(text)}</title></polygon>')


def line_chart(title: str, series: list[Series], x_label: str, y_label: str, log_x: bool = False,
               x_range: tuple[float, float] | None = None, y_range: tuple[float, float] | None = None,
               y_scale: str = "auto") -> str:
    """An SVG ``<svg>`` element: one line per series, error bars, axes with ticks, a legend on the right.

    On a log x axis (budgets) there is a tick at every x present, each labelled (:func:`x_tick_rows`; the chart
    grows downwards by a row where labels would otherwise overlap). ``y_scale``: ``"linear"``, ``"log"`` or
    ``"auto"`` (log where :func:`log_scale_wanted` says so of the points' y values, never with a ``y_range``); a
    log axis says so in its label, has ticks at round numbers (:func:`_log_ticks`), and an error bar's end at or
    below zero is drawn to the bottom of the plot. On a linear axis whose range is chosen here, points far from the
    rest at their x (:func:`off_scale`) are left out of the range and drawn at its edge as an arrow that names their
    value; anything beyond the range is drawn at its edge."""
    xs = [p[0] for s in series if not s.full_width for p in s.points]
    centres = [p[1] for s in series for p in s.points]
    log_y = y_scale == "log" or (y_scale == "auto" and y_range is None and log_scale_wanted(centres))
    if log_y and min(centres) <= 0:
        raise ValueError("a log y axis needs positive values")
    outside = off_scale(series) if not log_y and y_range is None else set()
    ys = [v for index, s in enumerate(series) for number, p in enumerate(s.points) if (index, number) not in outside
          for v in ((p[1],) if p[2] is None else (p[1], p[2], p[3])) if not log_y or v > 0]
    x_low, x_high = x_range or (min(xs), max(xs))
    y_low, y_high = y_range or (min(ys), max(ys))
    y_transform = math.log10 if log_y else float
    if y_range is None:
        low, high = y_transform(y_low), y_transform(y_high)
        pad = 0.08 * (high - low or abs(high) or 1.0)
        y_low, y_high = (10 ** (low - pad), 10 ** (high + pad)) if log_y else (y_low - pad, y_high + pad)
    if log_y:
        y_label = f"{y_label} (log scale)"
    transform = math.log10 if log_x else float
    tx_low, tx_high = transform(x_low), transform(x_high)
    if tx_high == tx_low:
        tx_low, tx_high = tx_low - 0.5, tx_high + 0.5
    plot_w, plot_h = WIDTH - MARGIN_LEFT - MARGIN_RIGHT, HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    plot_bottom = MARGIN_TOP + plot_h

    def px(x: float) -> float:
        return MARGIN_LEFT + (transform(x) - tx_low) / (tx_high - tx_low) * plot_w

    def py(y: float) -> float:
        if log_y and y <= 0:  # an error bar's end: the bar runs to the bottom of the plot
            return float(plot_bottom)
        place = MARGIN_TOP + (y_transform(y_high) - y_transform(y)) / (y_transform(y_high) - y_transform(y_low)) * plot_h
        return min(max(place, MARGIN_TOP), plot_bottom)  # beyond the range: at its edge

    x_ticks = sorted(set(xs)) if log_x else _nice_ticks(x_low, x_high)
    x_tick_labels = [f"{x:g}" for x in x_ticks]
    rows = x_tick_rows([px(x) for x in x_ticks], x_tick_labels)
    axes_height = HEIGHT + TICK_ROW_HEIGHT * max(rows, default=0)
    height = max(axes_height, MARGIN_TOP + LEGEND_ROW_HEIGHT * len(series) + LEGEND_ROW_HEIGHT)
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
              f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">'),
             f'<text x="{MARGIN_LEFT}" y="18" class="title">{escape(title)}</text>',
             f'<rect x="{MARGIN_LEFT}" y="{MARGIN_TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for x, text, row in zip(x_ticks, x_tick_labels, rows):
        drop = TICK_ROW_HEIGHT * row  # a label moved down a row keeps a longer tick leading to it
        parts.append(f'<line x1="{px(x):.1f}" y1="{plot_bottom}" x2="{px(x):.1f}" y2="{plot_bottom + 4 + drop}" '
                     f'class="axis"/><text x="{px(x):.1f}" y="{plot_bottom + 16 + drop}" class="tick" '
                     f'text-anchor="middle">{text}</text>')
    for y in (_log_ticks if log_y else _nice_ticks)(y_low, y_high):
        parts.append(f'<line x1="{MARGIN_LEFT}" y1="{py(y):.1f}" x2="{MARGIN_LEFT + plot_w}" y2="{py(y):.1f}" '
                     f'class="grid"/><text x="{MARGIN_LEFT - 6}" y="{py(y) + 4:.1f}" class="tick" '
                     f'text-anchor="end">{y:.4g}</text>')
    parts.append(f'<text x="{MARGIN_LEFT + plot_w / 2:.1f}" y="{axes_height - 8}" class="label" '
                 f'text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text transform="translate(14 {MARGIN_TOP + plot_h / 2:.1f}) rotate(-90)" class="label" '
                 f'text-anchor="middle">{escape(y_label)}</text>')
    for index, s in enumerate(series):
        color = s.style.color
        if s.full_width:
            level = py(s.points[0][1])
            path = f"{MARGIN_LEFT},{level:.1f} {MARGIN_LEFT + plot_w},{level:.1f}"
        else:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _, _ in s.points)
        dash = f' stroke-dasharray="{s.style.dash}"' if s.style.dash else ""
        width = EMPHASIS_WIDTH if s.style.emphasised else LINE_WIDTH
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="{width:g}"{dash}>'
                     f"<title>{escape(s.name)}</title></polyline>")
        for number, (x, y, low, high) in enumerate(s.points):
            if low is not None:
                parts.append(f'<line x1="{px(x):.1f}" y1="{py(low):.1f}" x2="{px(x):.1f}" '
                             f'y2="{py(high):.1f}" stroke="{color}"/>')
            if (index, number) in outside:
                parts.append(_off_scale_arrow(px(x), py(y), y > y_high, color,
                                              f"{s.name}: {y:.4g} at {x:g}, off the scale"))
            elif s.style.marker:
                parts.append(_marker(s.style, px(x), py(y)))
        legend_x, legend_y = WIDTH - MARGIN_RIGHT + 12, MARGIN_TOP + 14 + LEGEND_ROW_HEIGHT * index
        parts.append(f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 20}" y2="{legend_y - 4}" '
                     f'stroke="{color}" stroke-width="{width:g}"{dash}/>')
        if s.style.marker:
            parts.append(_marker(s.style, legend_x + 10, legend_y - 4))
        legend_class = "legend own" if s.style.emphasised else "legend"
        parts.append(f'<text x="{legend_x + 26}" y="{legend_y}" class="{legend_class}">{escape(_shortened(s.name))}'
                     f"<title>{escape(s.name)}</title></text>")
    parts.append("</svg>")
    return "".join(parts)


def horizontal(name: str, y: float) -> Series:
    """A dashed horizontal line across the plot at ``y`` (e.g. the reference's noise floor)."""
    return Series(name, ((0.0, y, None, None),), REFERENCE_STYLE, full_width=True)


def diagonal(name: str = "calibrated") -> Series:
    return Series(name, ((0.0, 0.0, None, None), (1.0, 1.0, None, None)), REFERENCE_STYLE)
