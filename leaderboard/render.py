"""The leaderboard as Markdown, CSV, JSON, or one self-contained HTML page with embedded SVG plots.

Every format shows, per track (task at a budget), the ranked method configurations with the mean and
standard deviation over seeds of every metric, the seed count, the reference's noise floor as the
ceiling row, and the cost: epochs used and wall-clock seconds (means over seeds); then the same statistics
on each test block (clean and shifted parts of the test set), with the noise floor of each. An entry that
changed the task's network (MC dropout) is marked and footnoted, and carries ``architecture_change`` in CSV
and JSON.

An entry is named by its method, then in parentheses its label where the submitter gave one, else its short
config hash where the task holds other configurations of the method (:func:`ranking.entry_name`). Markdown
and the page explain each hash they show (a legend: what the configuration changes from the method's
defaults, :mod:`leaderboard.configs`) and list the submitters' notes; CSV and JSON carry the label, the
config hash and the notes in their own fields.

In the page's plots each method keeps one colour on every plot (from its place among the page's sorted
method names), and each configuration of a method on a task its own marker shape.

Stored text (method and task names, labels, submitters, devices, notes, block names, config hashes and
configurations) came from submitters, so every format escapes it for its reader: :func:`csv_text` for
spreadsheets, :func:`md_text` for Markdown, :func:`html.escape` (tabulate's ``html`` format,
:mod:`leaderboard.svg`) for the page; JSON escapes by itself.
"""

from __future__ import annotations

import csv
import io
import json
import numbers
from collections.abc import Callable
from html import escape

from tabulate import tabulate

from leaderboard import configs, reliability, svg
from leaderboard.ranking import (
    PRIMARY,
    STD_DDOF,
    Track,
    by_task,
    changed_network_notes,
    entry_label,
    entry_name,
    higher_is_better,
    mean_std,
    primary_description,
    tracks,
)
from leaderboard.store import OVERALL_BLOCK, RunRow

FORMATS = ("md", "html", "csv", "json")
FLOOR_ROW = "HMC noise floor"

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A spreadsheet runs a text cell that starts with one of these as a formula (OWASP, "CSV Injection")."""


def csv_text(text: str) -> str:
    """Text for a spreadsheet cell: text a spreadsheet would run as a formula (it starts with one of
    :data:`FORMULA_STARTS`) gets a leading ``'``, as the OWASP CSV-injection guidance recommends; the writer
    also quotes every text cell, so a separator or a quote inside it cannot start another cell."""
    text = printable_lines(text)  # no terminal escape or bidirectional override reaches a terminal or a sheet
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


def printable_text(text: str) -> str:
    """``text`` with every character that is not printable as a space: no line break, tab, terminal escape or
    bidirectional override reaches a table, and no cell can read as tabulate's separating-line marker (``\\x01``),
    which would drop the table's rows."""
    return "".join(ch if ch.isprintable() else " " for ch in str(text))


def printable_lines(text: str) -> str:
    """:func:`printable_text` that keeps line breaks (``\n``), for notes shown as paragraphs."""
    return "\n".join(printable_text(line) for line in str(text).split("\n"))


def html_text(text: str) -> str:
    """Stored text for the page: printable (no bidirectional override can reorder what follows), then escaped."""
    return escape(printable_text(text))


def md_text(text: str) -> str:
    """Text for a Markdown table cell, heading or paragraph that shows as written and cannot change the document.

    Every character that is not printable (line breaks of every kind, tabs, terminal escapes, bidirectional
    overrides) becomes a space, so the text stays on its line and the table keeps its rows. ``|`` is escaped
    (no column is added), and so is the backslash, so that text cannot undo an escape; backticks (a code
    span could swallow a column separator), brackets (links, images that load a URL) and ``$`` (math) are
    escaped; ``&``, ``<`` and ``>`` become entities, so no HTML passes. Emphasis characters (``*``, ``_``,
    ``~``) are left alone: they can change the typeface, not the table.
    """
    return printable_text(text).translate(_MARKDOWN_ESCAPES)


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
        rows.append({"rank": rank, "method": entry_label(entry, quote), "seeds": len(entry.seeds),
                     **{quote(m): _mean_std_text(entry.metrics[m]) if m in entry.metrics else "" for m in names},
                     "epochs used": "declared" if epochs is None else f"{epochs:g}",
                     "verified": f"{entry.verified}/{len(entry.seeds)}",
                     "wall s": "" if wall is None else f"{wall:.1f}",
                     "device": ", ".join(quote(d) for d in sorted(entry.devices)),
                     "submitted by": ", ".join(quote(s) for s in sorted(entry.submitters))})
    return rows


BLOCKS_EXPLANATION = ("Per test block: the same statistics on each part of the test set, ranks as on the whole "
                      "test set, each block's noise floor first")


def _block_rows(track: Track, quote: Callable[[str], str] = str) -> list[dict]:
    """The table of ``track``'s entries on each test block (``quote``: as for :func:`_display_rows`); the seeds are
    those of the table of the whole test set."""
    names = track.metric_names
    rows = []
    for block in track.blocks:
        rows.append({"block": quote(block), "rank": "", "method": FLOOR_ROW,
                     **{quote(m): ("n/a" if track.floor(m, block) is None else f"{track.floor(m, block):.4f}")
                        for m in names}})
        for rank, entry in enumerate(track.entries, start=1):
            values = entry.metrics_by_block.get(block, {})
            rows.append({"block": quote(block), "rank": rank, "method": entry_label(entry, quote),
                         **{quote(m): _mean_std_text(values[m]) if values.get(m) else "" for m in names}})
    return rows


def _legend_intro(track: Track, quote: Callable[[str], str] = str) -> str:
    return (f"Configuration hashes: what each configuration changes from its method's defaults for "
            f"{quote(track.task)} in this installation")


def _configuration_legend(track: Track, quote: Callable[[str], str] = str) -> list[tuple[str, str]]:
    """(name, what it changes) for each entry of ``track`` shown by its config hash (``quote``: as for
    :func:`entry_name`)."""
    return [(entry_name(e, quote), quote(configs.differences(e.method, track.task, e.config, e.source)))
            for e in track.entries if e.hash_shown]


def _notes(track: Track, quote: Callable[[str], str] = str) -> list[tuple[str, str]]:
    """(name, note) for each distinct note of each entry of ``track``."""
    return [(entry_name(e, quote), quote(note)) for e in track.entries for note in sorted(e.notes)]


def _markdown_list(items: list[tuple[str, str]]) -> str:
    """A list of ``**name**: text`` items (both escaped): the item starts with our ``**``, so no stored text opens
    a heading, a quote or another list inside it."""
    return "".join(f"- **{name}**: {text}\n" for name, text in items)


def _html_list(items: list[tuple[str, str]], css_class: str | None = None) -> str:
    """A ``<ul>`` of ``name: text`` items (both escaped)."""
    attribute = f' class="{css_class}"' if css_class else ""
    return f"<ul{attribute}>" + "".join(f"<li>{name}: {text}</li>" for name, text in items) + "</ul>"


def _heading(track: Track, quote: Callable[[str], str] = str) -> str:
    return f"{quote(track.task)} v{track.task_version}, budget {track.budget:g} epochs"


def markdown(all_tracks: list[Track]) -> str:
    """Every stored text goes through :func:`md_text`: a name cannot add a column, a row or HTML. Lines that
    hold stored text start with text of ours (a table's ``|``, a list item's ``- **``), so none can become a
    heading, a quote or a link definition."""
    parts = []
    for track in all_tracks:
        parts.append(f"## {_heading(track, md_text)}\n\n{_explanation(track.kind)}.\n")
        parts.append(tabulate(_display_rows(track, md_text), headers="keys", tablefmt="github",
                              disable_numparse=True) + "\n")
        parts.extend(note + "\n" for note in changed_network_notes(track, md_text))
        if track.blocks:
            parts.append(f"{BLOCKS_EXPLANATION}.\n")
            parts.append(tabulate(_block_rows(track, md_text), headers="keys", tablefmt="github",
                                  disable_numparse=True) + "\n")
        legend, notes = _configuration_legend(track, md_text), _notes(track, md_text)
        if legend:
            parts.append(f"{_legend_intro(track, md_text)}:\n\n" + _markdown_list(legend))
        if notes:
            parts.append("Notes:\n\n" + _markdown_list(notes))
    return "\n".join(parts)


def _summary(values: list[float]) -> dict:
    mean, std = mean_std(values)
    return {"mean": mean, "std": std, "values": values}


def as_json(all_tracks: list[Track]) -> str:
    document = {
        "std_ddof": STD_DDOF,
        "ranked_by": {kind: list(metrics) for kind, metrics in PRIMARY.items()},
        "tracks": [{
            "task": t.task, "task_version": t.task_version, "kind": t.kind, "budget": t.budget,
            "reference_sha256": t.reference_sha256, "noise_floor": t.noise_floor, "blocks": t.blocks,
            "entries": [{
                "rank": rank, "method": e.method, "label": e.label, "config_hash": e.config_hash, "config": e.config,
                "source": e.source, "architecture_change": e.architecture_change, "seeds": e.seeds,
                "metrics": {m: _summary(values) for m, values in e.metrics.items()},
                "metrics_by_block": {block: {m: _summary(values) for m, values in metrics.items()}
                                     for block, metrics in e.metrics_by_block.items()},
                "epochs_used_mean": _optional_mean(e.epochs_used), "verified_seeds": e.verified,
                "wall_seconds_mean": _optional_mean(e.wall_seconds), "devices": sorted(e.devices),
                "submitters": sorted(e.submitters), "notes": sorted(e.notes),
            } for rank, e in enumerate(t.entries, start=1)],
        } for t in all_tracks],
    }
    return json.dumps(document, indent=2) + "\n"


def as_csv(all_tracks: list[Track]) -> str:
    """Per track and block (``all``, the whole test set, first, then each test block): one noise-floor line and one
    line per entry; ``<metric>_mean`` / ``<metric>_std`` columns. Several notes of an entry are one per line.

    Safe to open in a spreadsheet: numbers are written as numbers (unquoted), every text cell is quoted and goes
    through :func:`csv_text` (each element of a ``;``-joined list too), so no stored text runs as a formula."""
    names = list(dict.fromkeys(m for t in all_tracks for m in t.metric_names))
    header = ["task", "task_version", "budget", "block", "rank", "method", "label", "config_hash",
              "architecture_change", "seeds", *[f"{m}_{stat}" for m in names for stat in ("mean", "std")],
              "epochs_used_mean", "verified_seeds", "wall_seconds_mean", "devices", "submitters", "notes"]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([csv_text(name) for name in header])
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC, restval="")

    def write(cells: dict) -> None:
        writer.writerow({name: _csv_cell(value) for name, value in cells.items()})

    for t in all_tracks:
        for block in (OVERALL_BLOCK, *t.blocks):
            track_cells = {"task": t.task, "task_version": t.task_version, "budget": _csv_number(t.budget),
                           "block": block}
            write({**track_cells, "method": FLOOR_ROW, **{f"{m}_mean": t.floor(m, block) for m in t.metric_names}})
            for rank, e in enumerate(t.entries, start=1):
                metrics = e.metrics if block == OVERALL_BLOCK else e.metrics_by_block.get(block, {})
                cells = {f"{m}_{stat}": value for m, values in metrics.items()
                         for stat, value in zip(("mean", "std"), mean_std(values))}
                write({**track_cells, "rank": rank, "method": e.method, "label": e.label,
                       "config_hash": e.config_hash, "architecture_change": e.architecture_change,
                       "seeds": len(e.seeds), **cells,
                       "epochs_used_mean": _optional_mean(e.epochs_used), "verified_seeds": e.verified,
                       "wall_seconds_mean": _optional_mean(e.wall_seconds),
                       "devices": ";".join(csv_text(d) for d in sorted(e.devices)),
                       "submitters": ";".join(csv_text(s) for s in sorted(e.submitters)),
                       "notes": "\n".join(csv_text(n) for n in sorted(e.notes))})
    return buffer.getvalue()


def _styles(task_tracks: list[Track], methods: list[str]) -> dict[tuple, svg.Style]:
    """The look of each configuration on a task's plots, by entry identity: its method's colour from the method's
    place in ``methods`` (the page's sorted method names, so a method has one colour on every plot of the page)
    and a marker shape per configuration of the method on this task (by label, then config hash)."""
    identities = sorted({e.identity for t in task_tracks for e in t.entries},
                        key=lambda identity: (identity[0], identity[2] or "", identity[1]))
    return {identity: svg.series_style(methods.index(identity[0]),
                                       [i for i in identities if i[0] == identity[0]].index(identity))
            for identity in identities}


def _fidelity_charts(task_tracks: list[Track], styles: dict[tuple, svg.Style]) -> list[str]:
    """Per primary metric: mean ± std against budget (log scale), one line per method configuration."""
    first = task_tracks[0]
    entries = {e.identity: e for t in task_tracks for e in t.entries}
    charts = []
    for metric in PRIMARY[first.kind]:
        series = []
        for identity, style in styles.items():
            points = tuple((t.budget, *e.summary(metric)) for t in task_tracks for e in t.entries
                           if e.identity == identity and metric in e.metrics)
            series.append(svg.Series(entry_label(entries[identity]), points, style))
        floor = first.floor(metric)
        if floor is not None:
            series.append(svg.horizontal(FLOOR_ROW, floor))
        direction = "higher" if higher_is_better(metric) else "lower"
        charts.append(svg.line_chart(f"{first.task}: {metric} against budget ({direction} is better)", series,
                                     "budget (epochs, log scale)", metric, log_x=True))
    return charts


def _reliability_chart(track: Track, styles: dict[tuple, svg.Style]) -> str | None:
    """Reliability diagram of every entry on ``track`` with labelled test points, seeds pooled; the legend in the
    order of the task's other charts."""
    entries = sorted((e for e in track.entries if e.reliability), key=lambda e: list(styles).index(e.identity))
    series = [svg.Series(entry_label(e), tuple((x, y, None) for x, y in reliability.pooled_curve(e.reliability)),
                         styles[e.identity]) for e in entries]
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
.notes li { white-space: pre-line; }
"""


def html_page(all_tracks: list[Track]) -> str:
    """One HTML file with inline CSS and SVG: no script, no external resource."""
    methods = sorted({e.method for t in all_tracks for e in t.entries})
    body = []
    for (task, version, _), task_tracks in by_task(all_tracks).items():
        styles = _styles(task_tracks, methods)
        charts = _fidelity_charts(task_tracks, styles)
        diagram = _reliability_chart(task_tracks[-1], styles)
        body.append(f'<section id="{html_text(task)}"><h2>{html_text(task)} v{version}</h2>')
        body.append(f"<p>{escape(_explanation(task_tracks[0].kind))}.</p>")
        body.append('<div class="charts">' + "".join(charts + ([diagram] if diagram else [])) + "</div>")
        for track in task_tracks:
            body.append(f"<h3>{html_text(_heading(track))}</h3>")
            body.append(tabulate(_display_rows(track, printable_text), headers="keys", tablefmt="html",
                                 disable_numparse=True))
            body.extend(f"<p>{html_text(note)}</p>" for note in changed_network_notes(track))
            if track.blocks:
                body.append(f"<p>{escape(BLOCKS_EXPLANATION)}.</p>")
                # The block's name comes first in its rows: a stored name must not read as a separating line.
                body.append(tabulate(_block_rows(track, printable_text), headers="keys", tablefmt="html",
                                     disable_numparse=True))
            legend = _configuration_legend(track, html_text)
            notes = _notes(track, lambda text: escape(printable_lines(text)))
            if legend:
                body.append(f"<p>{_legend_intro(track, html_text)}:</p>" + _html_list(legend))
            if notes:
                body.append("<p>Notes:</p>" + _html_list(notes, "notes"))
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>bdl-bench leaderboard</title>"
            f"<style>{STYLE}</style></head><body><h1>bdl-bench leaderboard</h1>"
            "<p>How close each approximate inference method gets to the HMC reference posterior under an epoch "
            "budget. Cost: epochs used and wall-clock seconds, means over seeds.</p>"
            + "".join(body) + "</body></html>\n")


def render(rows: list[RunRow], fmt: str) -> str:
    all_tracks = tracks(rows)
    return {"md": markdown, "html": html_page, "csv": as_csv, "json": as_json}[fmt](all_tracks)
