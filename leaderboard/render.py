"""The leaderboard as Markdown, CSV, JSON, or one self-contained HTML page with embedded SVG plots.

Every format shows, per track (task at a budget), the ranked method configurations with the mean and
standard deviation over seeds of every metric, the seed count, the reference's noise floor as the
ceiling row, and the cost: epochs used and wall-clock seconds (means over seeds). An entry that changed
the task's network (MC dropout) is marked and footnoted, and carries ``architecture_change`` in CSV and JSON.

Stored text (method and task names, submitters, devices, notes, config hashes) came from submitters, so every
format escapes it for its reader: :func:`csv_text` for spreadsheets, :func:`md_text` for Markdown,
:func:`html.escape` (tabulate's ``html`` format, :mod:`leaderboard.svg`) for the page; JSON escapes by itself.
"""

from __future__ import annotations

import csv
import io
import json
import numbers
from collections.abc import Callable
from html import escape

from tabulate import tabulate

from leaderboard import reliability, svg
from leaderboard.ranking import (
    PRIMARY,
    STD_DDOF,
    Entry,
    Track,
    changed_network_notes,
    entry_label,
    higher_is_better,
    mean_std,
    primary_description,
    tracks,
)
from leaderboard.store import RunRow

FORMATS = ("md", "html", "csv", "json")
FLOOR_ROW = "HMC noise floor"

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A spreadsheet runs a text cell that starts with one of these as a formula (OWASP, "CSV Injection")."""


def csv_text(text: str) -> str:
    """Text for a spreadsheet cell: text a spreadsheet would run as a formula (it starts with one of
    :data:`FORMULA_STARTS`) gets a leading ``'``, as the OWASP CSV-injection guidance recommends; the writer
    also quotes every text cell, so a separator or a quote inside it cannot start another cell."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _csv_cell(value):
    """Numbers stay numbers, whatever their sign (decided by type, not by text); None is an empty cell; anything
    else is text and goes through :func:`csv_text`."""
    if value is None:
        return ""
    if isinstance(value, numbers.Real):
        return value
    return csv_text(str(value))


def _csv_number(value: float) -> int | float:
    """A whole number as an integer (budget 10, not 10.0), so that it reads as it is shown elsewhere."""
    return int(value) if float(value).is_integer() else float(value)


_MARKDOWN_ESCAPES = str.maketrans({
    "\\": "\\\\", "|": "\\|", "`": "\\`", "[": "\\[", "]": "\\]", "$": "\\$",
    "&": "&amp;", "<": "&lt;", ">": "&gt;",
})


def md_text(text: str) -> str:
    """Text for a Markdown table cell, heading or paragraph that shows as written and cannot change the document.

    Every character that is not printable (line breaks of every kind, tabs, terminal escapes, bidirectional
    overrides) becomes a space, so the text stays on its line and the table keeps its rows. ``|`` is escaped
    (no column is added), and so is the backslash, so that text cannot undo an escape; backticks (a code
    span could swallow a column separator), brackets (links, images that load a URL) and ``$`` (math) are
    escaped; ``&``, ``<`` and ``>`` become entities, so no HTML passes. Emphasis characters (``*``, ``_``,
    ``~``) are left alone: they can change the typeface, not the table.
    """
    printable = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return printable.translate(_MARKDOWN_ESCAPES)


def _mean_std_text(values: list[float]) -> str:
    mean, std = mean_std(values)
    return f"{mean:.4f}" if std is None else f"{mean:.4f} ± {std:.4f}"


def _optional_mean(values: list[float]) -> float | None:
    return mean_std(values)[0] if values else None


def _explanation(kind: str) -> str:
    return (f"Ranked by {primary_description(kind)}; mean ± standard deviation over seeds (ddof = {STD_DDOF}, "
            "seed count in the seeds column); the first row is the reference's noise floor: two HMC references "
            "from disjoint halves of the chains compared with each other")


def _display_rows(track: Track, quote: Callable[[str], str] = str) -> list[dict]:
    """The table of ``track``; ``quote`` escapes every stored text (names, devices, submitters) for the format."""
    names = track.metric_names
    floor = {"rank": "", "method": FLOOR_ROW, "seeds": "",
             **{quote(m): ("n/a" if track.floor(m) is None else f"{track.floor(m):.4f}") for m in names},
             "epochs used": "", "verified": "", "wall s": "", "device": "", "submitted by": ""}
    rows = [floor]
    for rank, entry in enumerate(track.entries, start=1):
        epochs, wall = _optional_mean(entry.epochs_used), _optional_mean(entry.wall_seconds)
        rows.append({"rank": rank, "method": entry_label(track, entry, quote), "seeds": len(entry.seeds),
                     **{quote(m): _mean_std_text(entry.metrics[m]) if m in entry.metrics else "" for m in names},
                     "epochs used": "declared" if epochs is None else f"{epochs:g}",
                     "verified": f"{entry.verified}/{len(entry.seeds)}",
                     "wall s": "" if wall is None else f"{wall:.1f}",
                     "device": ", ".join(quote(d) for d in sorted(entry.devices)),
                     "submitted by": ", ".join(quote(s) for s in sorted(entry.submitters))})
    return rows


def _heading(track: Track, quote: Callable[[str], str] = str) -> str:
    return f"{quote(track.task)} v{track.task_version}, budget {track.budget:g} epochs"


def markdown(all_tracks: list[Track]) -> str:
    """Every stored text goes through :func:`md_text`: a name cannot add a column, a row or HTML."""
    parts = []
    for track in all_tracks:
        parts.append(f"## {_heading(track, md_text)}\n\n{_explanation(track.kind)}.\n")
        parts.append(tabulate(_display_rows(track, md_text), headers="keys", tablefmt="github",
                              disable_numparse=True) + "\n")
        parts.extend(note + "\n" for note in changed_network_notes(track, md_text))
    return "\n".join(parts)


def _summary(entry: Entry, metric: str) -> dict:
    mean, std = entry.summary(metric)
    return {"mean": mean, "std": std, "values": entry.metrics[metric]}


def as_json(all_tracks: list[Track]) -> str:
    document = {
        "std_ddof": STD_DDOF,
        "ranked_by": {kind: list(metrics) for kind, metrics in PRIMARY.items()},
        "tracks": [{
            "task": t.task, "task_version": t.task_version, "kind": t.kind, "budget": t.budget,
            "reference_sha256": t.reference_sha256, "noise_floor": t.noise_floor,
            "entries": [{
                "rank": rank, "method": e.method, "config_hash": e.config_hash, "config": e.config,
                "source": e.source, "architecture_change": e.architecture_change, "seeds": e.seeds, "metrics": {m: _summary(e, m) for m in e.metrics},
                "epochs_used_mean": _optional_mean(e.epochs_used), "verified_seeds": e.verified,
                "wall_seconds_mean": _optional_mean(e.wall_seconds), "devices": sorted(e.devices), "submitters": sorted(e.submitters),
            } for rank, e in enumerate(t.entries, start=1)],
        } for t in all_tracks],
    }
    return json.dumps(document, indent=2) + "\n"


def as_csv(all_tracks: list[Track]) -> str:
    """One line per entry and one noise-floor line per track; ``<metric>_mean`` / ``<metric>_std`` columns.

    Safe to open in a spreadsheet: numbers are written as numbers (unquoted), every text cell is quoted and goes
    through :func:`csv_text` (each element of a ``;``-joined list too), so no stored text runs as a formula."""
    names = list(dict.fromkeys(m for t in all_tracks for m in t.metric_names))
    header = ["task", "task_version", "budget", "rank", "method", "config_hash", "architecture_change", "seeds",
              *[f"{m}_{stat}" for m in names for stat in ("mean", "std")],
              "epochs_used_mean", "verified_seeds", "wall_seconds_mean", "devices", "submitters"]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([csv_text(name) for name in header])
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC, restval="")

    def write(cells: dict) -> None:
        writer.writerow({name: _csv_cell(value) for name, value in cells.items()})

    for t in all_tracks:
        track_cells = {"task": t.task, "task_version": t.task_version, "budget": _csv_number(t.budget)}
        write({**track_cells, "method": FLOOR_ROW, **{f"{m}_mean": t.floor(m) for m in t.metric_names}})
        for rank, e in enumerate(t.entries, start=1):
            cells = {f"{m}_{stat}": value for m in e.metrics for stat, value in zip(("mean", "std"), e.summary(m))}
            write({**track_cells, "rank": rank, "method": e.method, "config_hash": e.config_hash,
                   "architecture_change": e.architecture_change, "seeds": len(e.seeds), **cells,
                   "epochs_used_mean": _optional_mean(e.epochs_used), "verified_seeds": e.verified,
                   "wall_seconds_mean": _optional_mean(e.wall_seconds),
                   "devices": ";".join(csv_text(d) for d in sorted(e.devices)),
                   "submitters": ";".join(csv_text(s) for s in sorted(e.submitters))})
    return buffer.getvalue()


def _colours(task_tracks: list[Track]) -> dict[tuple[str, str], str]:
    """One colour per method configuration, the same in every chart of a task."""
    keys = dict.fromkeys((e.method, e.config_hash) for t in task_tracks for e in t.entries)
    return {key: svg.color(index) for index, key in enumerate(keys)}


def _fidelity_charts(task_tracks: list[Track], colours: dict[tuple[str, str], str]) -> list[str]:
    """Per primary metric: mean ± std against budget (log scale), one line per method configuration."""
    first = task_tracks[0]
    methods = [method for method, _ in colours]
    charts = []
    for metric in PRIMARY[first.kind]:
        series = []
        for (method, config), colour in colours.items():
            points = []
            for t in task_tracks:
                entry = next((e for e in t.entries if (e.method, e.config_hash) == (method, config)), None)
                if entry is not None and metric in entry.metrics:
                    points.append((t.budget, *entry.summary(metric)))
            label = method if methods.count(method) == 1 else f"{method} [{config[:8]}]"
            series.append(svg.Series(label, tuple(points), colour))
        floor = first.floor(metric)
        if floor is not None:
            series.append(svg.horizontal(FLOOR_ROW, floor))
        direction = "higher" if higher_is_better(metric) else "lower"
        charts.append(svg.line_chart(f"{first.task}: {metric} against budget ({direction} is better)", series,
                                     "budget (epochs, log scale)", metric, log_x=True))
    return charts


def _reliability_chart(track: Track, colours: dict[tuple[str, str], str]) -> str | None:
    """Reliability diagram of every entry on ``track`` with labelled test points, seeds pooled."""
    series = [svg.Series(entry_label(track, e), tuple((x, y, None) for x, y in reliability.pooled_curve(e.reliability)),
                         colours[(e.method, e.config_hash)])
              for e in track.entries if e.reliability]
    if not series:
        return None
    if track.kind == "classification":
        title, x_label, y_label = "confidence", "mean confidence (top class)", "accuracy"
    else:
        title, x_label, y_label = "quantile coverage", "predictive quantile level", "fraction of targets below it"
    return svg.line_chart(f"{track.task}, budget {track.budget:g}: reliability ({title})", [*series, svg.diagonal()],
                          x_label, y_label, x_range=(0.0, 1.0), y_range=(0.0, 1.0))


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; }
tbody tr:first-child td { font-style: italic; color: #555; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
svg .title { font-size: 13px; font-weight: bold; }
svg .tick, svg .legend { font-size: 11px; }
svg .label { font-size: 12px; }
svg .frame { fill: none; stroke: #999; }
svg .grid { stroke: #e5e5e5; }
svg .axis { stroke: #999; }
"""


def html_page(all_tracks: list[Track]) -> str:
    """One HTML file with inline CSS and SVG: no script, no external resource."""
    by_task: dict[tuple, list[Track]] = {}
    for track in all_tracks:
        by_task.setdefault((track.task, track.task_version, track.reference_sha256), []).append(track)
    body = []
    for (task, version, _), task_tracks in by_task.items():
        colours = _colours(task_tracks)
        charts = _fidelity_charts(task_tracks, colours)
        diagram = _reliability_chart(task_tracks[-1], colours)
        body.append(f'<section id="{escape(task)}"><h2>{escape(task)} v{version}</h2>')
        body.append(f"<p>{escape(_explanation(task_tracks[0].kind))}.</p>")
        body.append('<div class="charts">' + "".join(charts + ([diagram] if diagram else [])) + "</div>")
        for track in task_tracks:
            body.append(f"<h3>{escape(_heading(track))}</h3>")
            body.append(tabulate(_display_rows(track), headers="keys", tablefmt="html", disable_numparse=True))
            body.extend(f"<p>{escape(note)}</p>" for note in changed_network_notes(track))
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>bdl-bench leaderboard</title>"
            f"<style>{STYLE}</style></head><body><h1>bdl-bench leaderboard</h1>"
            "<p>How close each approximate inference method gets to the HMC reference posterior under an epoch "
            "budget. Cost: epochs used and wall-clock seconds, means over seeds.</p>"
            + "".join(body) + "</body></html>\n")


def render(rows: list[RunRow], fmt: str) -> str:
    all_tracks = tracks(rows)
    return {"md": markdown, "html": html_page, "csv": as_csv, "json": as_json}[fmt](all_tracks)
