"""Grouping stored runs into tracks and ranking the methods on each.

A track is one task (version and reference) at one budget. An entry is one method configuration
(method name, config hash and label) on a track, aggregated over its seeds: the mean and the sample
standard deviation (``STD_DDOF`` = 1; undefined for a single seed), on the whole test set and on each
test block. The store gives a configuration one label on its task (:mod:`leaderboard.store`); should a
database edited by hand hold two, each is its own entry, so nothing is merged or dropped unseen.

Ranking, by the primary fidelity metric (``PRIMARY``): classification by agreement with the HMC
reference (higher is better), ties broken by total variation (lower is better); regression by the
mean 1-D Wasserstein-2 distance to the reference's predictive (lower is better).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from leaderboard.store import OVERALL_BLOCK, RunRow

STD_DDOF = 1

HIGHER_IS_BETTER = {"agreement", "accuracy", "log_likelihood", "competition_w"}
"""Every other metric (total_variation, w1, w2, nll, ece, rmse) is better when lower."""

PRIMARY: dict[str, tuple[str, ...]] = {"classification": ("agreement", "total_variation"), "regression": ("w2",)}
METRIC_ORDER: dict[str, tuple[str, ...]] = {
    "classification": ("agreement", "total_variation", "accuracy", "nll", "ece"),
    "regression": ("w2", "w1", "competition_w", "rmse", "log_likelihood"),
}


def higher_is_better(metric: str) -> bool:
    return metric in HIGHER_IS_BETTER


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and standard deviation with ``STD_DDOF``; the std is None when there are too few values."""
    array = np.asarray(values, dtype=np.float64)
    std = float(array.std(ddof=STD_DDOF)) if len(array) > STD_DDOF else None
    return float(array.mean()), std


@dataclass
class Entry:
    """One method configuration on a track; per-seed lists are in seed order."""

    method: str
    config_hash: str
    config: dict
    source: str
    label: str | None = None
    """The submitter's name for the configuration, shown instead of its hash."""
    seeds: list[int] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    """Per metric, its value on the whole test set for each seed."""
    metrics_by_block: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Per test block (in the task's order), per metric, its value on that block for each seed."""
    epochs_used: list[float] = field(default_factory=list)
    wall_seconds: list[float] = field(default_factory=list)
    devices: set[str] = field(default_factory=set)
    submitters: set[str] = field(default_factory=set)
    notes: set[str] = field(default_factory=set)
    """The submitters' notes (distinct, empty ones left out)."""
    reliability: list[dict] = field(default_factory=list)
    verified: int = 0
    """How many of the entry's seeds were re-executed and reproduced (``submit --verify``)."""
    architecture_change: str | None = None
    """How the method changed the task's network (it then approximates another posterior than the reference's)."""
    shares_method: bool = False
    """The task's tracks hold other configurations of this method (set by :func:`tracks`)."""

    @property
    def identity(self) -> tuple[str, str, str | None]:
        return self.method, self.config_hash, self.label

    @property
    def hash_shown(self) -> bool:
        """Whether :func:`entry_name` names the entry by its config hash (no label tells it from its method's other
        configurations)."""
        return self.label is None and self.shares_method

    def summary(self, metric: str) -> tuple[float, float | None]:
        return mean_std(self.metrics[metric])

    def add(self, row: RunRow) -> None:
        self.seeds.append(row.seed)
        for name, value in row.metrics[OVERALL_BLOCK].items():
            self.metrics.setdefault(name, []).append(value)
        for block, values in row.metrics.items():
            if block != OVERALL_BLOCK:
                for name, value in values.items():
                    self.metrics_by_block.setdefault(block, {}).setdefault(name, []).append(value)
        if row.epochs_used is not None:
            self.epochs_used.append(row.epochs_used)
        if row.wall_seconds is not None:
            self.wall_seconds.append(row.wall_seconds)
        if row.device:
            self.devices.add(row.device)
        self.submitters.add(row.submitter)
        if row.notes:
            self.notes.add(row.notes)
        if row.reliability is not None:
            self.reliability.append(row.reliability)
        self.verified += row.verified


@dataclass
class Track:
    task: str
    task_version: int
    kind: str
    reference_sha256: str
    budget: float
    noise_floor: dict | None
    entries: list[Entry] = field(default_factory=list)

    @property
    def metric_names(self) -> list[str]:
        """The task kind's metrics in display order, then any others the entries have."""
        present = {name for entry in self.entries for name in entry.metrics}
        ordered = [m for m in METRIC_ORDER[self.kind] if m in present]
        return ordered + sorted(present - set(ordered))

    @property
    def blocks(self) -> list[str]:
        """The test blocks the entries were scored on beyond the whole test set, in the task's order."""
        return list(dict.fromkeys(block for entry in self.entries for block in entry.metrics_by_block))

    def floor(self, metric: str, block: str = OVERALL_BLOCK) -> float | None:
        """The reference's noise floor for ``metric`` on ``block`` (the whole test set by default), if published."""
        values = (self.noise_floor or {}).get(block) or {}
        value = values.get(metric)
        return None if value is None or not math.isfinite(value) else float(value)


def rank_key(kind: str, entry: Entry) -> tuple[float, ...]:
    return tuple(-entry.summary(m)[0] if higher_is_better(m) else entry.summary(m)[0] for m in PRIMARY[kind])


def primary_description(kind: str) -> str:
    return ", then ".join(f"{m} ({'higher' if higher_is_better(m) else 'lower'} is better)" for m in PRIMARY[kind])


def tracks(rows: list[RunRow]) -> list[Track]:
    """Rows grouped into tracks (by task, version, reference, budget), entries ranked best first."""
    grouped: dict[tuple, Track] = {}
    for row in rows:
        track_key = (row.task, row.task_version, row.reference_sha256, row.budget)
        track = grouped.setdefault(track_key, Track(row.task, row.task_version, row.task_kind,
                                                    row.reference_sha256, row.budget, row.noise_floor))
        identity = (row.method, row.config_hash, row.label)
        entry = next((e for e in track.entries if e.identity == identity), None)
        if entry is None:
            entry = Entry(row.method, row.config_hash, row.config, row.source, label=row.label,
                          architecture_change=row.architecture_change)
            track.entries.append(entry)
        entry.add(row)
    for track in grouped.values():
        track.entries.sort(key=lambda entry: rank_key(track.kind, entry))
    ordered = sorted(grouped.values(), key=lambda t: (t.task, t.task_version, t.budget))
    for task_tracks in by_task(ordered).values():
        entries = [entry for track in task_tracks for entry in track.entries]
        for entry in entries:
            entry.shares_method = len({e.identity for e in entries if e.method == entry.method}) > 1
    return ordered


def by_task(all_tracks: list[Track]) -> dict[tuple, list[Track]]:
    """Tracks grouped by task (name, version and reference), in their order: one section of the page, whose charts
    draw each configuration across the budgets."""
    grouped: dict[tuple, list[Track]] = {}
    for track in all_tracks:
        grouped.setdefault((track.task, track.task_version, track.reference_sha256), []).append(track)
    return grouped


CHANGED_NETWORK_MARK = "\u2020"
"""Follows the label of an entry that changed the task's network (a footnote says how)."""


def entry_name(entry: Entry, quote: Callable[[str], str] = str) -> str:
    """The method name, then in parentheses its label, else its short config hash where the task's tracks hold
    other configurations of the method (:attr:`Entry.hash_shown`).

    ``quote`` escapes the stored (submitter's) text for the output format; the parentheses are added after it,
    and mean nothing in any format, so no text can close them into markup."""
    method = quote(entry.method)
    if entry.label is not None:
        return f"{method} ({quote(entry.label)})"
    return f"{method} ({quote(entry.config_hash[:8])})" if entry.hash_shown else method


def entry_label(entry: Entry, quote: Callable[[str], str] = str) -> str:
    """:func:`entry_name`, with :data:`CHANGED_NETWORK_MARK` where the entry changed the task's network."""
    name = entry_name(entry, quote)
    return name if entry.architecture_change is None else f"{name} {CHANGED_NETWORK_MARK}"


def changed_network_notes(track: Track, quote: Callable[[str], str] = str) -> list[str]:
    """One footnote per entry of ``track`` that changed the task's network (``quote``: as for :func:`entry_name`)."""
    return [f"{CHANGED_NETWORK_MARK} {entry_name(e, quote)}: {quote(e.architecture_change)}; a changed "
            "network approximates another posterior than the reference's" for e in track.entries
            if e.architecture_change]
