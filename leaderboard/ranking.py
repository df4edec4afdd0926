"""Grouping stored runs into tracks and ranking the methods on each.

A track is one task (version and reference) at one budget. An entry is one method configuration
(method name and config hash) on a track, aggregated over its seeds: the mean and the sample
standard deviation (``STD_DDOF`` = 1; undefined for a single seed).

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
    seeds: list[int] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    epochs_used: list[float] = field(default_factory=list)
    wall_seconds: list[float] = field(default_factory=list)
    devices: set[str] = field(default_factory=set)
    submitters: set[str] = field(default_factory=set)
    reliability: list[dict] = field(default_factory=list)
    verified: int = 0
    """How many of the entry's seeds were re-executed and reproduced (``submit --verify``)."""
    architecture_change: str | None = None
    """How the method changed the task's network (it then approximates another posterior than the reference's)."""

    def summary(self, metric: str) -> tuple[float, float | None]:
        return mean_std(self.metrics[metric])

    def add(self, row: RunRow) -> None:
        self.seeds.append(row.seed)
        for name, value in row.metrics[OVERALL_BLOCK].items():
            self.metrics.setdefault(name, []).append(value)
        if row.epochs_used is not None:
            self.epochs_used.append(row.epochs_used)
        if row.wall_seconds is not None:
            self.wall_seconds.append(row.wall_seconds)
        if row.device:
            self.devices.add(row.device)
        self.submitters.add(row.submitter)
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

    def floor(self, metric: str) -> float | None:
        """The reference's noise floor for ``metric`` on the whole test set, if published."""
        overall = (self.noise_floor or {}).get(OVERALL_BLOCK) or {}
        value = overall.get(metric)
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
        entry = next((e for e in track.entries if (e.method, e.config_hash) == (row.method, row.config_hash)), None)
        if entry is None:
            entry = Entry(row.method, row.config_hash, row.config, row.source,
                          architecture_change=row.architecture_change)
            track.entries.append(entry)
        entry.add(row)
    for track in grouped.values():
        track.entries.sort(key=lambda entry: rank_key(track.kind, entry))
    return sorted(grouped.values(), key=lambda t: (t.task, t.task_version, t.budget))


CHANGED_NETWORK_MARK = "\u2020"
"""Follows the label of an entry that changed the task's network (a footnote says how)."""


def entry_label(track: Track, entry: Entry, quote: Callable[[str], str] = str) -> str:
    """The method name, with a short config hash where the track holds several configurations of it, and
    :data:`CHANGED_NETWORK_MARK` where it changed the task's network.

    ``quote`` escapes the stored (submitter's) text for the output format; the label's own brackets and mark
    are added after it, so they keep their meaning."""
    same_method = [e for e in track.entries if e.method == entry.method]
    method = quote(entry.method)
    label = method if len(same_method) == 1 else f"{method} [{quote(entry.config_hash[:8])}]"
    return label if entry.architecture_change is None else f"{label} {CHANGED_NETWORK_MARK}"


def changed_network_notes(track: Track, quote: Callable[[str], str] = str) -> list[str]:
    """One footnote per entry of ``track`` that changed the task's network (``quote``: as for :func:`entry_label`)."""
    return [f"{CHANGED_NETWORK_MARK} {entry_label(track, e, quote)[:-2]}: {quote(e.architecture_change)}; a changed "
            "network approximates another posterior than the reference's" for e in track.entries
            if e.architecture_change]
