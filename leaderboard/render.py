"""The leaderboard as Markdown, CSV, JSON, or one self-contained HTML page with embedded SVG plots.

Every format shows, per track (task at a budget), the ranked method configurations (:mod:`leaderboard.ranking`:
in the order of their means, equal means sharing a rank, marked ``=``; whether the seeds tell each apart from the
first, and if not, how many seeds its difference would need) with the mean over seeds of every metric and its
95% Student-t interval (none for a single seed, shown ``n=1``), the seed count, whether the entry is within the
reference's noise floor, the noise floor as the ceiling row, and the cost: epochs used and wall-clock seconds
(means over seeds); then the same statistics on each test block (clean and shifted parts of the test set), with
the noise floor of each. An entry that changed the task's network (MC dropout) is marked and footnoted, and
carries ``architecture_change`` in CSV and JSON. Where two or more tasks share a budget, a summary across tasks
comes first: each method configuration's mean rank over those tasks, the range of its ranks, and on how many it
is in the top group and within the noise floor (:func:`ranking.standings`).

An entry is named by its method, then in parentheses its label where the submitter gave one, else its short
config hash where the task holds other configurations of the method (:func:`ranking.entry_name`). Markdown
and the page explain each hash they show (a legend: what the configuration changes from the method's
defaults, :mod:`leaderboard.configs`) and list each distinct submitter's note once, with the entries it came
with; CSV and JSON carry the label, the config hash and the notes in their own fields.

Markdown and the page open with one reading guide (:func:`guide`): what ranks, what each value and column means, how
numbers are rounded; after it, each table says only where it differs from the guide (:func:`_table_notes`). Means and
half-widths are shown to the decimal place of their standard error's first significant digit, epochs to four
significant figures (:func:`estimate_text`, :func:`significant_text`), and the page's cells never wrap (a table
wider than the page scrolls); CSV and JSON keep every number at full precision. Where the board shows the shipped
results beside the user's own entries (:func:`highlights_own`), the user's are set in bold in the tables and
emphasised on the plots.

In the page's plots each entry name keeps one look on every plot, from its place among the page's sorted entry
names: a colour of a colour-blind-safe palette and a marker shape, which together tell apart 45 series
(:func:`svg.series_style`); the y axis is logarithmic where the plotted means span more than a decade
(:func:`svg.log_scale_wanted`).

Stored text (method and task names, labels, submitters, devices, notes, block names, config hashes and
configurations) came from submitters, so every format escapes it for its reader: :func:`csv_text` for
spreadsheets, :func:`md_text` for Markdown, :func:`html.escape` (tabulate's ``html`` format,
:mod:`leaderboard.svg`) for the page; JSON escapes by itself.
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
from collections.abc import Callable
from html import escape

from tabulate import tabulate

from leaderboard import configs, reliability, svg
from leaderboard.ranking import (
    CONFIDENCE,
    FLOOR_RULE,
    INTERVAL_RULE,
    PRIMARY,
    RANK_RULE,
    ROUND_OFF,
    STD_DDOF,
    VERIFIED_RULE,
    Entry,
    Standing,
    Track,
    bounded_interval,
    by_task,
    changed_network_notes,
    entry_label,
    entry_name,
    estimate,
    higher_is_better,
    mean_std,
    primary_description,
    standings,
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


SE_SIGNIFICANT_DIGITS = 1
"""A mean and the half-width of its interval are shown to the decimal place of their standard error's first
significant digit (a mean of 0.103247 shows as 0.103 where its standard error is 0.0013, as 0.1032 where it is
0.0003): the standard error of n seeds is itself uncertain by about 1 / sqrt(2 (n - 1)) of its value (50% at 3 seeds,
24% at 10), so its second digit, and every digit of the mean past its first, is noise."""
UNMEASURED_DECIMALS = 4
"""Decimals of a number no standard error sizes: a single seed's value, seeds that all gave one value, a noise
floor."""
EPOCH_SIGNIFICANT_DIGITS = 4
"""Epochs used are shown to at most this many significant figures (9.108, not 9.10847): the meter's fractions of an
epoch beyond them are batches, not a difference in cost."""


def decimals_of(se: float, mean: float) -> int:
    """The decimal place (negative: tens, hundreds) of ``se``'s :data:`SE_SIGNIFICANT_DIGITS`-th significant digit;
    :data:`UNMEASURED_DECIMALS` where ``se`` is no spread (0, or round-off of ``mean``: ranking.ROUND_OFF)."""
    if se <= ROUND_OFF * max(1.0, abs(mean)):
        return UNMEASURED_DECIMALS
    return SE_SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(se))


def fixed_text(value: float, decimals: int) -> str:
    """``value`` rounded to ``decimals`` decimal places (to tens, hundreds where negative), without an exponent."""
    return f"{value:.{decimals}f}" if decimals >= 0 else f"{round(value, decimals):.0f}"


def significant_text(value: float, digits: int = EPOCH_SIGNIFICANT_DIGITS) -> str:
    """``value`` to at most ``digits`` significant figures, without an exponent or trailing zeros (10, 9.108,
    12350)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    text = fixed_text(value, digits - 1 - math.floor(math.log10(abs(value))))
    return text.rstrip("0").rstrip(".") if "." in text else text


def estimate_text(values: list[float]) -> str:
    """The mean and the half-width of its interval (:func:`ranking.estimate`), both to the decimal place of the
    standard error's first significant digit (:func:`decimals_of`), or the mean and ``n=1``."""
    value = estimate(values)
    if value.half_width is None:
        return f"{fixed_text(value.mean, UNMEASURED_DECIMALS)} (n=1)"
    decimals = decimals_of(value.se, value.mean)
    return f"{fixed_text(value.mean, decimals)} ± {fixed_text(value.half_width, decimals)}"


def rank_text(entry: Entry) -> str:
    """The entry's rank, ``=``-prefixed where another entry of its track shares it."""
    return f"={entry.rank}" if entry.tied else str(entry.rank)


def apart_text(entry: Entry) -> str:
    """Whether the seeds tell the entry apart from the first (:attr:`Entry.apart_from_first`): ``first`` for an entry
    ranked 1, ``n/a`` for one seed."""
    if entry.rank == 1:
        return "first"
    return "n/a" if entry.apart_from_first is None else ("yes" if entry.apart_from_first else "no")


def seeds_needed_text(entry: Entry) -> str:
    """:attr:`Entry.seeds_needed` as a count, ``∞`` where the means are equal, empty where none was computed."""
    needed = entry.seeds_needed
    return "" if needed is None else ("∞" if math.isinf(needed) else f"{needed:.0f}")


def _seeds_needed_number(entry: Entry) -> float | None:
    """:attr:`Entry.seeds_needed` for JSON and CSV: a number, or None (none computed, or equal means)."""
    return None if entry.seeds_needed is None or math.isinf(entry.seeds_needed) else int(entry.seeds_needed)


def floor_text(within: bool | None) -> str:
    return "n/a" if within is None else ("yes" if within else "no")


def verified_text(entry: Entry) -> str:
    """``3/3 bitwise``: the seeds re-executed and reproduced, and how each was compared (``records alone`` for a
    shipped entry, which the board does not re-execute)."""
    shown = f"{entry.verified}/{len(entry.seeds)}"
    if entry.source == "shipped" and not entry.verified:
        return f"{shown}, records alone"
    how = sorted(entry.verified_how.items())
    if len(how) == 1:
        return f"{shown} {how[0][0]}"
    return shown + "".join(f"; {count} {mode}" for mode, count in how)


def _optional_mean(values: list[float]) -> float | None:
    return mean_std(values)[0] if values else None


GUIDE_HEADING = "How to read the board"
SHIPPED_SOURCE = "shipped"
"""The ``source`` of an entry from the results shipped with bdl-bench (:mod:`leaderboard.shipped`)."""
OWN_MARK = "in bold"
"""How the Markdown and the page's tables set the user's own entries apart, as the guide words it."""


def _sentence(rule: str) -> str:
    return f"{rule[0].upper()}{rule[1:]}."


def highlights_own(all_tracks: list[Track]) -> bool:
    """Whether the board sets the user's own entries (any not from the shipped store) apart: only where it shows
    shipped entries beside them, the only entries they need telling from."""
    sources = {entry.source == SHIPPED_SOURCE for track in all_tracks for entry in track.entries}
    return sources == {True, False}


def is_own(entry: Entry, highlighted: bool) -> bool:
    return highlighted and entry.source != SHIPPED_SOURCE


def guide(all_tracks: list[Track]) -> str:
    """How to read every table of the board, said once at its top: what ranks each kind of task the board holds, what
    each value and column means and how numbers are rounded; a table says only where it differs
    (:func:`_table_notes`)."""
    kinds = sorted({track.kind for track in all_tracks})
    ranked = "; ".join(f"{kind} tasks by {primary_description(kind)}" for kind in kinds)
    own = (f" Your own entries (those not shipped with bdl-bench) are set {OWN_MARK}, and drawn with thicker lines "
           "and outlined markers on the page's plots." if highlights_own(all_tracks) else "")
    return (f"Each table is one task at one budget. Ranked: {ranked}. Each value is {INTERVAL_RULE}, both rounded to "
            f"the decimal place of the first significant digit of its standard error ({UNMEASURED_DECIMALS} "
            "decimals where there is none: one seed, seeds that all agree, the noise floor); the seed count is in "
            f"the seeds column. {_sentence(RANK_RULE)} {_sentence(FLOOR_RULE)} {_sentence(VERIFIED_RULE)} The "
            "first row is the reference's noise floor: the distance an independent run of the reference's sampler, "
            "as long and as autocorrelated but exact, is expected to score against the reference. Epochs used and "
            f"wall s: means over the seeds (epochs to at most {EPOCH_SIGNIFICANT_DIGITS} significant figures). "
            f"{BLOCKS_EXPLANATION}.{own}")


NO_FLOOR_NOTE = "This task's reference publishes no noise floor: within floor is n/a for every entry"


def _table_notes(track: Track) -> list[str]:
    """What the guide does not say of ``track``'s table: that its reference publishes no noise floor."""
    published = any(track.floor(metric) is not None for metric in track.metric_names)
    return [] if published else [NO_FLOOR_NOTE]


def _display_rows(track: Track, quote: Callable[[str], str] = str,
                  own: Callable[[str], str] | None = None) -> list[dict]:
    """The table of ``track``; ``quote`` escapes every stored text (names, devices, submitters) for the format,
    ``own`` marks the name of a user's own entry."""
    names = track.metric_names
    floor = {"rank": "", "method": FLOOR_ROW, "seeds": "",
             **{quote(m): ("n/a" if track.floor(m) is None else f"{track.floor(m):.4f}") for m in names},
             "told from #1": "", "seeds needed": "", "within floor": "", "epochs used": "", "verified": "", "wall s": "", "device": "", "submitted by": ""}
    rows = [floor]
    for entry in track.entries:
        epochs, wall = _optional_mean(entry.epochs_used), _optional_mean(entry.wall_seconds)
        name = entry_label(entry, quote)
        rows.append({"rank": rank_text(entry), "method": own(name) if own is not None and entry.source
                     != SHIPPED_SOURCE else name, "seeds": len(entry.seeds),
                     **{quote(m): estimate_text(entry.metrics[m]) if m in entry.metrics else "" for m in names},
                     "told from #1": apart_text(entry), "seeds needed": seeds_needed_text(entry),
                     "within floor": floor_text(entry.within_floor),
                     "epochs used": "declared" if epochs is None else significant_text(epochs),
                     "verified": quote(verified_text(entry)),
                     "wall s": "" if wall is None else f"{wall:.1f}",
                     "device": ", ".join(quote(d) for d in sorted(entry.devices)),
                     "submitted by": ", ".join(quote(s) for s in sorted(entry.submitters))})
    return rows


BLOCKS_EXPLANATION = ("Per test block: the same statistics on each part of the test set, ranks as on the whole "
                      "test set, each block's noise floor first")


def _block_rows(track: Track, quote: Callable[[str], str] = str,
                own: Callable[[str], str] | None = None) -> list[dict]:
    """The table of ``track``'s entries on each test block (``quote``, ``own``: as for :func:`_display_rows`); the
    seeds are those of the table of the whole test set."""
    names = track.metric_names
    rows = []
    for block in track.blocks:
        rows.append({"block": quote(block), "rank": "", "method": FLOOR_ROW,
                     **{quote(m): ("n/a" if track.floor(m, block) is None else f"{track.floor(m, block):.4f}")
                        for m in names}})
        for entry in track.entries:
            values = entry.metrics_by_block.get(block, {})
            name = entry_label(entry, quote)
            rows.append({"block": quote(block), "rank": rank_text(entry),
                         "method": own(name) if own is not None and entry.source != SHIPPED_SOURCE else name,
                         **{quote(m): estimate_text(values[m]) if values.get(m) else "" for m in names}})
    return rows


def _legend_intro(track: Track, quote: Callable[[str], str] = str) -> str:
    return (f"Configuration hashes: what each configuration changes from its method's defaults for "
            f"{quote(track.task)} in this installation")


def _configuration_legend(track: Track, quote: Callable[[str], str] = str) -> list[tuple[str, str]]:
    """(name, what it changes) for each entry of ``track`` shown by its config hash (``quote``: as for
    :func:`entry_name`)."""
    return [(entry_name(e, quote), quote(configs.differences(e.method, track.task, e.config, e.source)))
            for e in track.entries if e.hash_shown]


EVERY_ENTRY = "every entry"


def _notes(all_tracks: list[Track], quote: Callable[[str], str] = str,
           quote_note: Callable[[str], str] | None = None) -> list[tuple[str, str]]:
    """(where it applies, note) for each distinct note of the board, once (a sweep's note is every entry's): where
    is :data:`EVERY_ENTRY` if the note came with every entry of the board, else per track the entries it came with
    (all of the track's as :data:`EVERY_ENTRY`). ``quote`` escapes stored text (names, the task), ``quote_note``
    the note (default ``quote``)."""
    holders: dict[str, dict[int, list[Entry]]] = {}
    for index, track in enumerate(all_tracks):
        for entry in track.entries:
            for note in entry.notes:
                holders.setdefault(note, {}).setdefault(index, []).append(entry)
    every = sum(len(track.entries) for track in all_tracks)
    items = []
    for note, by_track in sorted(holders.items()):
        if sum(len(entries) for entries in by_track.values()) == every:
            where = EVERY_ENTRY
        else:
            where = "; ".join(f"{_heading(all_tracks[index], quote)}: " + (
                EVERY_ENTRY if len(entries) == len(all_tracks[index].entries)
                else ", ".join(entry_name(e, quote) for e in entries)) for index, entries in by_track.items())
        items.append((where, (quote_note or quote)(note)))
    return items


SUMMARY_HEADING = "Summary across tasks"
SUMMARY_EXPLANATION = ("Per budget held by two or more tasks: each method configuration's rank on each task it ran "
                       "(as in the task's table: its place in the order of the means), their mean and range (best "
                       "to worst), on how many of those tasks it is in the top group (ranked 1, or not told apart "
                       "from the first by its seeds), and on how many within the reference's noise floor (of those "
                       "whose reference publishes one). Tasks differ in their number of entries, and a method is "
                       "ranked only on the tasks it ran")


def _summary_rows(found: list[Standing], quote: Callable[[str], str] = str,
                  own: Callable[[str], str] | None = None) -> list[dict]:
    """The summary across tasks (``quote``, ``own``: as for :func:`_display_rows`)."""
    return [{"budget": f"{s.budget:g}", "method": own(entry_name(s.entry, quote)) if own is not None
             and s.entry.source != SHIPPED_SOURCE else entry_name(s.entry, quote), "tasks": s.tasks,
             "mean rank": f"{s.mean_rank:.2f}", "ranks": f"{min(s.ranks)}–{max(s.ranks)}",
             "top group": f"{s.firsts}/{s.tasks}",
             "within floor": "n/a" if s.floors == 0 else f"{s.within_floor}/{s.floors}"} for s in found]


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


def _bold(name: str) -> str:
    """A user's own entry's name (escaped already) in Markdown's bold: a ``*`` of the name's own can change the
    emphasis, never the table (:func:`md_text`)."""
    return f"**{name}**"


def markdown(all_tracks: list[Track], on_track: Callable[[int, int], None] | None = None) -> str:
    """Every stored text goes through :func:`md_text`: a name cannot add a column, a row or HTML. Lines that
    hold stored text start with text of ours (a table's ``|``, a list item's ``- **``), so none can become a
    heading, a quote or a link definition. ``on_track`` hears (tracks written, tracks) as each is written."""
    own = _bold if highlights_own(all_tracks) else None
    parts = [f"## {GUIDE_HEADING}\n\n{guide(all_tracks)}\n"]
    found = standings(all_tracks)
    if found:
        parts.append(f"## {SUMMARY_HEADING}\n\n{SUMMARY_EXPLANATION}.\n")
        parts.append(tabulate(_summary_rows(found, md_text, own), headers="keys", tablefmt="github",
                              disable_numparse=True) + "\n")
    for index, track in enumerate(all_tracks):
        if on_track is not None:
            on_track(index, len(all_tracks))
        parts.append(f"## {_heading(track, md_text)}\n")
        parts.extend(f"{note}.\n" for note in _table_notes(track))
        parts.append(tabulate(_display_rows(track, md_text, own=own), headers="keys", tablefmt="github",
                              disable_numparse=True) + "\n")
        parts.extend(note + "\n" for note in changed_network_notes(track, md_text))
        if track.blocks:
            parts.append(tabulate(_block_rows(track, md_text, own=own), headers="keys", tablefmt="github",
                                  disable_numparse=True) + "\n")
        legend = _configuration_legend(track, md_text)
        if legend:
            parts.append(f"{_legend_intro(track, md_text)}:\n\n" + _markdown_list(legend))
    notes = _notes(all_tracks, md_text)
    if notes:
        parts.append("Notes, each once, after where it applies:\n\n" + _markdown_list(notes))
    return "\n".join(parts)


def _statistics(metric: str, values: list[float]) -> dict:
    """A metric over seeds for JSON: the values (in seed order), n, mean, std, standard error, the interval (cut to
    the metric's range: :func:`ranking.bounded_interval`)."""
    value = estimate(values)
    interval = bounded_interval(metric, value)
    return {"mean": value.mean, "n": value.n, "std": value.std, "se": value.se,
            "ci": None if interval is None else list(interval), "values": values}


def _summary_json(found: list[Standing]) -> list[dict]:
    return [{"budget": s.budget, "method": s.entry.method, "label": s.entry.label,
             "config_hash": s.entry.config_hash if s.entry.hash_shown else None, "tasks": s.tasks,
             "mean_rank": s.mean_rank, "best_rank": min(s.ranks), "worst_rank": max(s.ranks),
             "in_top_group": s.firsts, "within_noise_floor_tasks": s.within_floor, "noise_floors_published": s.floors,
             "ranks": [{"task": t.task, "task_version": t.task_version, "rank": e.rank, "tied": e.tied}
                       for t, e in s.places]} for s in found]


def as_json(all_tracks: list[Track]) -> str:
    document = {
        "std_ddof": STD_DDOF,
        "confidence": CONFIDENCE,
        "interval": f"ci: {INTERVAL_RULE}",
        "rank_rule": RANK_RULE,
        "noise_floor_rule": FLOOR_RULE,
        "verified_rule": VERIFIED_RULE,
        "ranked_by": {kind: list(metrics) for kind, metrics in PRIMARY.items()},
        "summary": _summary_json(standings(all_tracks)),
        "tracks": [{
            "task": t.task, "task_version": t.task_version, "kind": t.kind, "budget": t.budget,
            "reference_sha256": t.reference_sha256, "noise_floor": t.noise_floor, "blocks": t.blocks,
            "entries": [{
                "rank": e.rank, "tied": e.tied, "apart_from_first": e.apart_from_first,
                "seeds_needed": _seeds_needed_number(e), "within_noise_floor": e.within_floor, "method": e.method,
                "label": e.label, "config_hash": e.config_hash, "config": e.config,
                "source": e.source, "architecture_change": e.architecture_change, "seeds": e.seeds,
                "metrics": {m: _statistics(m, values) for m, values in e.metrics.items()},
                "metrics_by_block": {block: {m: _statistics(m, values) for m, values in metrics.items()}
                                     for block, metrics in e.metrics_by_block.items()},
                "epochs_used_mean": _optional_mean(e.epochs_used), "verified_seeds": e.verified,
                "verified_how": e.verified_how,
                "wall_seconds_mean": _optional_mean(e.wall_seconds), "devices": sorted(e.devices),
                "submitters": sorted(e.submitters), "notes": sorted(e.notes),
            } for e in t.entries],
        } for t in all_tracks],
    }
    return json.dumps(document, indent=2) + "\n"


STATISTICS = ("mean", "se", "ci_low", "ci_high")
"""Per metric in CSV: the mean over seeds, its standard error and its interval (:func:`ranking.estimate`, cut to the
metric's range: :func:`ranking.bounded_interval`)."""
SUMMARY_COLUMNS = ("tasks", "mean_rank", "best_rank", "worst_rank", "in_top_group", "within_noise_floor_tasks",
                   "noise_floors_published")


def _flag(value: bool | None) -> int | None:
    """A yes/no cell as 1 or 0 (a spreadsheet's number; ``True`` would be written as text), None as empty."""
    return None if value is None else int(value)


def as_csv(all_tracks: list[Track]) -> str:
    """Rows of two sections (the ``section`` column): ``summary``, one row per :class:`ranking.Standing` (task and
    block empty; the ``SUMMARY_COLUMNS``); then ``track``, per track and block (``all``, the whole test set, first,
    then each test block) one noise-floor line and one line per entry: its rank, ``tied``, ``apart_from_first``
    (1 or 0; empty for an entry ranked 1 or of one seed), ``seeds_needed`` (empty where none was computed or the
    means are equal) and ``within_noise_floor`` (1 or 0; empty where no floor is published), the seeds (``seeds`` their count,
    ``seed_ids`` which), per metric the ``STATISTICS`` columns. Several notes of an entry are one per line.

    Safe to open in a spreadsheet: numbers are written as numbers (unquoted), every text cell is quoted and goes
    through :func:`csv_text` (each element of a ``;``-joined list too), so no stored text runs as a formula."""
    names = list(dict.fromkeys(m for t in all_tracks for m in t.metric_names))
    header = ["section", "task", "task_version", "budget", "block", "rank", "tied", "apart_from_first", "seeds_needed",
              "method", "label", "config_hash",
              "architecture_change", "seeds", "seed_ids", *[f"{m}_{stat}" for m in names for stat in STATISTICS],
              "within_noise_floor", "epochs_used_mean", "verified_seeds", "verified_how", "wall_seconds_mean",
              "devices", "submitters", "notes", *SUMMARY_COLUMNS]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([csv_text(name) for name in header])
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC, restval="")

    def write(cells: dict) -> None:
        writer.writerow({name: _csv_cell(value) for name, value in cells.items()})

    for s in standings(all_tracks):
        write({"section": "summary", "budget": _csv_number(s.budget), "method": s.entry.method, "label": s.entry.label,
               "config_hash": s.entry.config_hash if s.entry.hash_shown else None, "tasks": s.tasks,
               "mean_rank": s.mean_rank, "best_rank": min(s.ranks), "worst_rank": max(s.ranks),
               "in_top_group": s.firsts, "within_noise_floor_tasks": s.within_floor,
               "noise_floors_published": s.floors})
    for t in all_tracks:
        for block in (OVERALL_BLOCK, *t.blocks):
            track_cells = {"section": "track", "task": t.task, "task_version": t.task_version,
                           "budget": _csv_number(t.budget), "block": block}
            write({**track_cells, "method": FLOOR_ROW, **{f"{m}_mean": t.floor(m, block) for m in t.metric_names}})
            for e in t.entries:
                metrics = e.metrics if block == OVERALL_BLOCK else e.metrics_by_block.get(block, {})
                cells = {}
                for m, values in metrics.items():
                    value = estimate(values)
                    low, high = bounded_interval(m, value) or (None, None)
                    cells.update(zip((f"{m}_{stat}" for stat in STATISTICS), (value.mean, value.se, low, high)))
                write({**track_cells, "rank": e.rank, "tied": _flag(e.tied), "apart_from_first": _flag(e.apart_from_first),
                       "seeds_needed": _seeds_needed_number(e), "method": e.method, "label": e.label,
                       "config_hash": e.config_hash, "architecture_change": e.architecture_change,
                       "seeds": len(e.seeds), "seed_ids": ";".join(str(seed) for seed in e.seeds), **cells,
                       "within_noise_floor": _flag(e.within_floor),
                       "epochs_used_mean": _optional_mean(e.epochs_used), "verified_seeds": e.verified,
                       "verified_how": ";".join(f"{csv_text(mode)}: {count}"
                                                for mode, count in sorted(e.verified_how.items())),
                       "wall_seconds_mean": _optional_mean(e.wall_seconds),
                       "devices": ";".join(csv_text(d) for d in sorted(e.devices)),
                       "submitters": ";".join(csv_text(s) for s in sorted(e.submitters)),
                       "notes": "\n".join(csv_text(n) for n in sorted(e.notes))})
    return buffer.getvalue()


def _styles(task_tracks: list[Track], names: list[str], highlighted: bool) -> dict[tuple, svg.Style]:
    """The look of each configuration on a task's plots, by entry identity: the style (:func:`svg.series_style`) of
    its name's place in ``names`` (the page's sorted entry names, so a name looks the same on every plot of the page),
    emphasised where it is the user's own (:func:`is_own`). Two configurations of one name on a task (a label given
    twice) take the places after the page's names, so no two series of a plot look alike."""
    entries = {e.identity: e for t in task_tracks for e in t.entries}
    styles, taken, extra = {}, set(), len(names)
    for identity in sorted(entries, key=lambda identity: (entry_name(entries[identity]), identity[1])):
        place = names.index(entry_name(entries[identity]))
        if place in taken:
            place, extra = extra, extra + 1
        taken.add(place)
        styles[identity] = svg.series_style(place, emphasised=is_own(entries[identity], highlighted))
    return styles


def _fidelity_charts(task_tracks: list[Track], styles: dict[tuple, svg.Style]) -> list[str]:
    """Per primary metric: the mean and its interval against budget (log scale), one line per method configuration;
    the y axis logarithmic where the means span more than a decade."""
    first = task_tracks[0]
    entries = {e.identity: e for t in task_tracks for e in t.entries}
    charts = []
    for metric in PRIMARY[first.kind]:
        series = []
        for identity, style in styles.items():
            points = tuple((t.budget, e.estimate(metric).mean, *(bounded_interval(metric, e.estimate(metric))
                                                                    or (None, None)))
                           for t in task_tracks for e in t.entries if e.identity == identity and metric in e.metrics)
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
    series = [svg.Series(entry_label(e), tuple((x, y, None, None) for x, y in reliability.pooled_curve(e.reliability)),
                         styles[e.identity]) for e in entries]
    if not series:
        return None
    if track.kind == "classification":
        title, x_label, y_label = "confidence", "mean confidence (top class)", "accuracy"
    else:
        title, x_label, y_label = "quantile coverage", "predictive quantile level", "fraction of targets below it"
    return svg.line_chart(f"{track.task}, budget {track.budget:g}: reliability ({title})", [*series, svg.diagonal()],
                          x_label, y_label, x_range=(0.0, 1.0), y_range=(0.0, 1.0), y_scale="linear")


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
.table { overflow-x: auto; margin: 0.5em 0 1.5em; }
table { border-collapse: collapse; font-size: 0.85em; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; text-align: right; }
td { white-space: nowrap; }
th { background: #f2f2f2; }
tbody tr.floor td { font-style: italic; color: #555; }
tbody tr.own td { font-weight: bold; background: #fff4cc; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
svg .title { font-size: 13px; font-weight: bold; }
svg .tick, svg .legend { font-size: 11px; }
svg .legend.own { font-weight: bold; }
svg .label { font-size: 12px; }
svg .frame { fill: none; stroke: #999; }
svg .grid { stroke: #e5e5e5; }
svg .axis { stroke: #999; }
.notes li { white-space: pre-line; }
"""


def _html_table(rows: list[dict], own: list[bool] | None = None) -> str:
    """tabulate's HTML table of ``rows`` (which escapes every cell) in a box that scrolls where the page is narrower,
    each noise-floor row (no rank, the method cell :data:`FLOOR_ROW`) marked ``class="floor"`` for the page's style
    (the summary's rows are none, and a table of test blocks has one per block), and each row ``own`` says is the
    user's (:func:`is_own`) ``class="own"``."""
    table = tabulate(rows, headers="keys", tablefmt="html", disable_numparse=True)
    head, body = table.split("<tbody>", 1)
    before, *row_texts = body.split("<tr>")
    floors = {index for index, row in enumerate(rows) if row.get("rank") == "" and row.get("method") == FLOOR_ROW}
    mine = {index for index, flag in enumerate(own or []) if flag}
    return (f'<div class="table">{head}<tbody>{before}'
            + "".join(('<tr class="floor">' if index in floors else '<tr class="own">' if index in mine else "<tr>")
                      + text for index, text in enumerate(row_texts)) + "</div>")


def html_page(all_tracks: list[Track], on_track: Callable[[int, int], None] | None = None) -> str:
    """One HTML file with inline CSS and SVG: no script, no external resource. ``on_track`` hears (tracks written,
    tracks) as each task's plots and tables are written."""
    names = sorted({entry_name(e) for t in all_tracks for e in t.entries})
    highlighted = highlights_own(all_tracks)
    body = [f'<section id="guide"><h2>{GUIDE_HEADING}</h2><p>{escape(guide(all_tracks))}</p></section>']
    found = standings(all_tracks)
    if found:
        body.append(f'<section id="summary"><h2>{SUMMARY_HEADING}</h2><p>{escape(SUMMARY_EXPLANATION)}.</p>'
                    + _html_table(_summary_rows(found, printable_text),
                                  [is_own(s.entry, highlighted) for s in found]) + "</section>")
    written = 0
    for (task, version, _), task_tracks in by_task(all_tracks).items():
        if on_track is not None:
            on_track(written, len(all_tracks))
        written += len(task_tracks)
        styles = _styles(task_tracks, names, highlighted)
        charts = _fidelity_charts(task_tracks, styles)
        diagram = _reliability_chart(task_tracks[-1], styles)
        body.append(f'<section id="{html_text(task)}"><h2>{html_text(task)} v{version}</h2>')
        body.append('<div class="charts">' + "".join(charts + ([diagram] if diagram else [])) + "</div>")
        for track in task_tracks:
            own = [is_own(entry, highlighted) for entry in track.entries]
            body.append(f"<h3>{html_text(_heading(track))}</h3>")
            body.extend(f"<p>{escape(note)}.</p>" for note in _table_notes(track))
            body.append(_html_table(_display_rows(track, printable_text), [False, *own]))
            body.extend(f"<p>{html_text(note)}</p>" for note in changed_network_notes(track))
            if track.blocks:
                # The block's name comes first in its rows: a stored name must not read as a separating line.
                body.append(_html_table(_block_rows(track, printable_text),
                                        [flag for _ in track.blocks for flag in (False, *own)]))
            legend = _configuration_legend(track, html_text)
            if legend:
                body.append(f"<p>{_legend_intro(track, html_text)}:</p>" + _html_list(legend))
        body.append("</section>")
    notes = _notes(all_tracks, html_text, lambda text: escape(printable_lines(text)))
    if notes:
        body.append("<h2>Notes</h2><p>Each note once, after where it applies:</p>" + _html_list(notes, "notes"))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>bdl-bench leaderboard</title>"
            f"<style>{STYLE}</style></head><body><h1>bdl-bench leaderboard</h1>"
            "<p>How close each approximate inference method gets to the HMC reference posterior under an epoch "
            "budget. Cost: epochs used and wall-clock seconds, means over seeds.</p>"
            + "".join(body) + "</body></html>\n")


def render(rows: list[RunRow], fmt: str, on_track: Callable[[int, int], None] | None = None) -> str:
    """``rows`` ranked (:func:`ranking.tracks`) and written as ``fmt``; ``on_track`` (a progress bar) hears (tracks
    written, tracks) as the Markdown or the page is written, and when the board is done in every format."""
    all_tracks = tracks(rows)
    if fmt in ("md", "html"):
        text = {"md": markdown, "html": html_page}[fmt](all_tracks, on_track)
    else:
        text = {"csv": as_csv, "json": as_json}[fmt](all_tracks)
    if on_track is not None:
        on_track(len(all_tracks), len(all_tracks))
    return text
