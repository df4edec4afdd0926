"""Grouping stored runs into tracks, ranking the methods on each, and summarising the ranks across tasks.

A track is one task (version and reference) at one budget. An entry is one method configuration
(method name, config hash and label) on a track, aggregated over its seeds (:func:`estimate`): the mean, the
sample standard deviation (``STD_DDOF`` = 1), the standard error and the two-sided ``CONFIDENCE`` (95%) Student-t
interval of the mean (n - 1 degrees of freedom; none of the three for a single seed), on the whole test set and
on each test block. The store gives a configuration one label on its task (:mod:`leaderboard.store`); should a
database edited by hand hold two, each is its own entry, so nothing is merged or dropped unseen.

Ranking, by the primary fidelity metrics (``PRIMARY``): classification by agreement with the HMC reference
(higher is better), then total variation (lower is better); regression by the mean 1-D Wasserstein-2 distance
to the reference's predictive (lower is better). An entry's rank is its place in the order of the means
(:func:`rank_key`: the first primary metric, then the next); entries whose means are equal up to round-off share a
rank. The point estimate orders, so more spread never lifts an entry above one with a better mean, and a new entry
never reorders the others. What the seeds can tell is said beside the rank (:func:`rank_entries`): whether each entry
is told apart from the first, by Welch's two-sided t-test on the first primary metric, the track's comparisons with
the first corrected together by Holm's step-down procedure at family-wise level 1 - ``CONFIDENCE`` (the entries not
told apart form the top group), and, for those not told apart, how many seeds per entry a difference of the observed
size and spread would need to be told apart with probability ``POWER`` (:func:`seeds_to_tell_apart`). Whether an
entry is within the reference's noise floor (:func:`within_noise_floor`: its seeds cannot be told from an
independent, exact run of the reference's sampler) is said too; it moves no rank.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.special
import scipy.stats

from bench.trust import UNVERIFIED_MARK, UNVERIFIED_NOTE, scored_unverified
from leaderboard.store import OVERALL_BLOCK, RunRow

STD_DDOF = 1
CONFIDENCE = 0.95
"""The level of the seeds' t-intervals shown; 1 - CONFIDENCE is the level of the test that separates two entries."""
INTERVAL_RULE = (f"the mean over seeds ± the half-width of its {CONFIDENCE:.0%} Student-t interval (n - 1 degrees of "
                 "freedom; n=1: one seed, no interval)")
POWER = 0.8
"""The chance of telling a difference apart that :func:`seeds_to_tell_apart` plans the seeds for."""
RANK_RULE = ("rank: the place in the order of the means over the seeds (the first primary metric, then the next; "
             "equal means share a rank, marked =), so more spread never lifts an entry; told from #1: whether the "
             "seeds tell the entry apart from the first by Welch's two-sided t-test on the first primary metric, the "
             f"track's comparisons with the first Holm-corrected together at family-wise level {1 - CONFIDENCE:.0%} "
             "(the entries not told apart are the top group); seeds needed: for one not told apart, the seeds per "
             f"entry that would tell a difference of the observed size and spread apart with probability {POWER:.0%} "
             "by Welch's t-test at the Bonferroni level, never fewer than the entry holds plus one")
FLOOR_CRITICAL = 1.3
""""Within floor" allows the seeds' mean to be worse than the floor by this many times sqrt(spread^2 + se^2)
(:func:`within_noise_floor`, on :data:`FLOOR_METRICS`): the value at which the simulation with a known answer
(``benchmarks/floor_calibration.py``, kept in ``benchmarks/results/floor-calibration.json``) calls an exact sampler's
10 seeds within floor 93 to 97% of the time in every setting it holds (homogeneous and heterogeneous chains,
classification and regression); ``tests/benchmarks/test_floor_calibration.py`` holds the constant to that."""
FLOOR_RULE = ("within floor: on total variation (classification) or W1 (regression), the metrics whose floor holds "
              "on the references' own chains, the seeds' mean is not worse than the reference's noise floor (the "
              "distance an independent run of the reference's sampler, as long and as autocorrelated but exact, is "
              f"expected to score) by more than {FLOOR_CRITICAL} x sqrt(spread^2 + se^2), the spread being how far "
              "such a run may score from the floor (the reference's own Monte Carlo error included, from its "
              "chains) and se the seeds' standard error: an exact sampler's 10 seeds are called within floor "
              "about 95% of the time (one seed: not tested)")
VERIFIED_RULE = ("verified: how many seeds were re-executed under the meter and reproduced (submit --verify), and how "
                 "each was compared: bitwise where what decides round-off was the run's, else cross-environment "
                 "(against two seeds' distance, to round-off, or statistically against re-executed seeds); shipped "
                 "entries are records alone, which python -m bench verify leaderboard/shipped re-executes")
"""The rules above in words, for the tables' explanations and the JSON document."""
VERIFIED_HOW_UNKNOWN = "how not recorded"
"""The comparison of a run verified before the database recorded how (schema version 5)."""
METHOD_WARNED = "the method warned of its run"
"""How a warning the method recorded of a seed's run (a target it did not reach) opens the note that shows it."""
ROUND_OFF = 1e-12
"""Two means closer than this x max(1, |mean|) are one number summed in two ways (``[0.1] * 3`` averages to
0.1 + 1.4e-17), not a difference a test could find."""

HIGHER_IS_BETTER = {"agreement", "accuracy", "log_likelihood", "competition_w"}
"""Every other metric (total_variation, w1, w2, nll, ece, rmse) is better when lower."""

METRIC_RANGE: dict[str, tuple[float, float]] = {
    **{name: (0.0, 1.0) for name in ("agreement", "total_variation", "accuracy", "ece")},
    **{name: (0.0, math.inf) for name in ("w1", "w2", "rmse", "nll")},
    "competition_w": (-math.inf, 0.0),
}
"""The values each metric can take (bench.metrics): an interval shown as bounds is cut to them
(:func:`bounded_interval`). A metric not named here (the regression log-likelihood) is unbounded."""


def bounded_interval(metric: str, value: "Estimate") -> tuple[float, float] | None:
    """The estimate's interval cut to the values ``metric`` can take (:data:`METRIC_RANGE`): a mean of 0.98 with a
    half-width of 0.05 is [0.93, 1] in agreement. None for one seed."""
    if value.interval is None:
        return None
    low, high = METRIC_RANGE.get(metric, (-math.inf, math.inf))
    return max(value.interval[0], low), min(value.interval[1], high)


PRIMARY: dict[str, tuple[str, ...]] = {"classification": ("agreement", "total_variation"), "regression": ("w2",)}
FLOOR_METRICS: dict[str, tuple[str, ...]] = {"classification": ("total_variation",), "regression": ("w1",)}
"""The metrics "within floor" (:func:`within_noise_floor`) is judged on: those whose floor holds on the shipped
references' own chains. The floor assumes a distance shrinks as the Monte Carlo error's standard deviation does;
with half of each reference's chains as one exact run against the other half
(``python benchmarks/floor_calibration.py --reference-splits``, kept in
``benchmarks/results/floor-reference-splits.json``, shown in docs/leaderboard.md) total variation and W1 score at
their floor on average, while the disagreement rate (a few test points near a tie between two classes decide it) and
W2 (its finite-sample bias shrinks more slowly) score about a spread or more beyond it on some references: an exact
sampler would be called outside the floor far more often than 5% of the time on those two."""
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


@dataclass(frozen=True)
class Estimate:
    """A metric's mean over ``n`` seeds, with the sample standard deviation (``STD_DDOF``), the standard error of
    the mean (std / sqrt(n)) and the half-width of its two-sided ``CONFIDENCE`` Student-t interval (n - 1
    degrees of freedom); the last three are None for a single seed, which measures no spread."""

    mean: float
    n: int
    std: float | None
    se: float | None
    half_width: float | None

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.half_width is None else (self.mean - self.half_width, self.mean + self.half_width)


@functools.lru_cache(maxsize=1024)
def _t_quantile(degrees_of_freedom: float) -> float:
    """The two-sided ``CONFIDENCE`` quantile of Student's t, computed once per degrees of freedom (a board asks for it
    per entry, block and metric: thousands of times for a handful of seed counts)."""
    return float(scipy.stats.t.ppf(0.5 + CONFIDENCE / 2, degrees_of_freedom))


def estimate(values: list[float]) -> Estimate:
    mean, std = mean_std(values)
    if std is None:
        return Estimate(mean, len(values), None, None, None)
    se = std / math.sqrt(len(values))
    return Estimate(mean, len(values), std, se, _t_quantile(len(values) - 1) * se)


def welch_p(a: Estimate, b: Estimate) -> float | None:
    """The two-sided p-value of Welch's t-test of equal means (Welch-Satterthwaite degrees of freedom).

    None when either estimate comes from one seed, which has no spread to test with; 1 for means equal up to
    ``ROUND_OFF``; for two estimates without spread (every seed gave the same value), 0 when their means differ."""
    if a.se is None or b.se is None:
        return None
    if abs(a.mean - b.mean) <= ROUND_OFF * max(1.0, abs(a.mean), abs(b.mean)):
        return 1.0
    variance = a.se ** 2 + b.se ** 2
    if variance == 0:
        return 0.0
    share_a, share_b = a.se ** 2 / variance, b.se ** 2 / variance  # shares, so that tiny errors cannot underflow
    degrees_of_freedom = 1 / (share_a ** 2 / (a.n - 1) + share_b ** 2 / (b.n - 1))
    return float(2 * scipy.stats.t.sf(abs(a.mean - b.mean) / math.sqrt(variance), degrees_of_freedom))


def significantly_different(a: Estimate, b: Estimate) -> bool:
    """Welch's two-sided t-test (:func:`welch_p`) rejects equal means at level 1 - ``CONFIDENCE``."""
    p = welch_p(a, b)
    return p is not None and p < 1 - CONFIDENCE


def holm_rejected(p_values: dict, level: float) -> set:
    """The keys of ``p_values`` whose hypotheses Holm's step-down procedure rejects at family-wise ``level``: in
    increasing order of p, the j-th smallest (j = 0, 1, ...) is rejected while p <= level / (m - j), m the number
    of hypotheses; the first that is not stops it."""
    rejected = set()
    for step, (key, p) in enumerate(sorted(p_values.items(), key=lambda item: item[1])):
        if p > level / (len(p_values) - step):
            break
        rejected.add(key)
    return rejected


POWER_NODES = 24
"""Gauss-Laguerre nodes per sample variance in :func:`welch_power`'s integral (24 x 24 points): within 0.001 of 48
nodes' power at 3 seeds, the count whose chi-square is least smooth, and equal to 5 decimals from 5 seeds on."""
POWER_EXACT_SEEDS = 100
"""Up to this many seeds per entry :func:`welch_power` integrates over the sample variances; beyond, they are precise
(their relative standard error is under 15%), and the power is the normal one at Student's critical value, which
differs from the integral by under 0.002 at 53 to 100 seeds (the quadrature overflows in the thousands)."""


@functools.lru_cache(maxsize=256)
def _variance_nodes(seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of a sample variance's law relative to its true value, chi^2_(n-1) / (n - 1): Gauss-Laguerre
    of the gamma density of shape (n - 1) / 2 (a chi^2_k / k is a gamma of shape k / 2 and scale 2 / k)."""
    degrees = seeds - 1
    nodes, weights = scipy.special.roots_genlaguerre(POWER_NODES, degrees / 2 - 1)
    return 2 * nodes / degrees, weights / weights.sum()


def welch_power(difference: float, variance_a: float, variance_b: float, seeds: int, alpha: float) -> float:
    """The probability that Welch's two-sided t-test at level ``alpha`` tells apart two entries of ``seeds`` seeds
    each whose means differ by ``difference`` and whose seeds have these variances. The difference of the means is
    normal and independent of the sample variances, so, given them, the test rejects with a normal probability (its
    critical value is Student's at their Welch-Satterthwaite degrees of freedom); that probability is integrated over
    the two variances' chi-square laws (:func:`_variance_nodes`). The noncentral t at the true variances' degrees of
    freedom overstates it at few seeds (0.886 for 0.852 at 5 seeds a side) and fails in SciPy at large ones. Beyond
    ``POWER_EXACT_SEEDS`` the variances are taken as known."""
    spread = math.sqrt((variance_a + variance_b) / seeds)
    degrees = seeds - 1
    if seeds > POWER_EXACT_SEEDS:
        sample_a, sample_b, weights = np.array([[variance_a]]), np.array([[variance_b]]), np.ones((1, 1))
    else:
        nodes, node_weights = _variance_nodes(seeds)
        sample_a, sample_b = variance_a * nodes[:, None], variance_b * nodes[None, :]
        weights = node_weights[:, None] * node_weights[None, :]
    share_a, share_b = sample_a / seeds, sample_b / seeds
    welch_degrees = (share_a + share_b) ** 2 / (share_a ** 2 / degrees + share_b ** 2 / degrees)
    critical = scipy.stats.t.ppf(1 - alpha / 2, welch_degrees) * np.sqrt(share_a + share_b)
    rejects = scipy.stats.norm.sf((critical - difference) / spread) + scipy.stats.norm.cdf((-critical - difference)
                                                                                           / spread)
    return float(np.sum(weights * rejects))


def seeds_to_tell_apart(a: Estimate, b: Estimate, comparisons: int) -> float | None:
    """Seeds per entry that would tell apart two entries whose means differ as ``a``'s and ``b``'s do, with their
    spread, with probability ``POWER``, in Welch's two-sided test at level (1 - ``CONFIDENCE``) / ``comparisons`` (the
    Bonferroni level: Holm's first step, the strictest): the least n >= 2 whose :func:`welch_power` reaches ``POWER``
    (Student's t, not the normal approximation, which at few seeds promises power the test does not have).
    ``math.inf`` where the means are equal up to round-off (no difference to find); None where either has one seed;
    2 where neither has spread (any difference is then told apart)."""
    if a.std is None or b.std is None:
        return None
    difference = abs(a.mean - b.mean)
    if difference <= ROUND_OFF * max(1.0, abs(a.mean), abs(b.mean)):
        return math.inf
    variance_a, variance_b = a.std ** 2, b.std ** 2
    if variance_a + variance_b == 0:
        return 2.0
    alpha = (1 - CONFIDENCE) / max(comparisons, 1)

    def enough(seeds: int) -> bool:
        return welch_power(difference, variance_a, variance_b, seeds, alpha) >= POWER

    # Start from the normal approximation's count, which the t-test almost always needs, or one seed more.
    z = scipy.stats.norm.ppf(1 - alpha / 2) + scipy.stats.norm.ppf(POWER)
    high = max(2, math.ceil(z ** 2 * (variance_a + variance_b) / difference ** 2))
    if enough(high):
        if high == 2 or not enough(high - 1):
            return float(high)
        low = 1
    else:
        low, step = high, 1
        while not enough(low + step):
            low, step = low + step, step * 2
        high = low + step
    while high - low > 1:  # the power grows with the seeds: bisect for the least count that is enough
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return float(high)


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
    """The submitters' notes (distinct, empty ones left out), and what the method warned of each seed's run
    (:data:`METHOD_WARNED`)."""
    reliability: list[dict] = field(default_factory=list)
    unverified_files: bool = False
    """Some seed was scored against a file no published or supplied sha256 vouches for (trusted on first use, or its
    trust not recorded: :func:`bench.trust.scored_unverified`); a row that says nothing of its trust (None) is not."""
    verified: int = 0
    """How many of the entry's seeds were re-executed and reproduced (``submit --verify``)."""
    verified_how: dict[str, int] = field(default_factory=dict)
    """Of those, how many were compared each way (:class:`bench.verify.Verification`'s mode; ``not recorded`` for
    a run verified before the database kept it)."""
    architecture_change: str | None = None
    """How the method changed the task's network (it then approximates another posterior than the reference's)."""
    shares_method: bool = False
    """The task's tracks hold other configurations of this method (set by :func:`tracks`)."""
    rank: int = 0
    """Its place in the order of the track's means (set by :func:`rank_entries`)."""
    tied: bool = False
    """Another entry of the track has the same means, and so the same rank."""
    apart_from_first: bool | None = None
    """Whether the seeds tell it apart from the track's first entry (Holm-corrected Welch tests); None for an entry
    ranked 1, or with one seed (set by :func:`rank_entries`)."""
    seeds_needed: float | None = None
    """For an entry not told apart from the first: the seeds per entry its difference would need
    (:func:`seeds_to_tell_apart`); None otherwise."""
    within_floor: bool | None = None
    """Within the reference's noise floor on every metric of :data:`FLOOR_METRICS` it publishes (None: it publishes
    none, or one seed)."""

    @property
    def in_top_group(self) -> bool:
        """Ranked 1, or not told apart from the entry ranked 1 by its seeds."""
        return self.rank == 1 or self.apart_from_first is False

    @property
    def identity(self) -> tuple[str, str, str | None]:
        return self.method, self.config_hash, self.label

    @property
    def hash_shown(self) -> bool:
        """Whether :func:`entry_name` names the entry by its config hash (no label tells it from its method's other
        configurations)."""
        return self.label is None and self.shares_method

    def estimate(self, metric: str) -> Estimate:
        return estimate(self.metrics[metric])

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
        for warning in row.warnings:
            self.notes.add(f"{METHOD_WARNED} (seed {row.seed}): {warning}")
        if row.reliability is not None:
            self.reliability.append(row.reliability)
        if row.trust is not None and scored_unverified(row.trust):
            self.unverified_files = True
            self.notes.add(UNVERIFIED_NOTE)
        self.verified += row.verified
        if row.verified:
            how = row.verification or VERIFIED_HOW_UNKNOWN
            self.verified_how[how] = self.verified_how.get(how, 0) + 1


@dataclass
class Track:
    task: str
    task_version: int
    kind: str
    reference_sha256: str
    budget: float
    noise_floor: dict | None
    entries: list[Entry] = field(default_factory=list)
    noise_floor_spread: dict | None = None
    """How far an exact run may score from each floor (:func:`reference.evidence.floor_spread`), as ``noise_floor``."""

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

    def spread(self, metric: str, block: str = OVERALL_BLOCK) -> float | None:
        """How far an exact run may score from the floor of ``metric`` on ``block``, if published."""
        values = (self.noise_floor_spread or {}).get(block) or {}
        value = values.get(metric)
        return None if value is None or not math.isfinite(value) or value < 0 else float(value)


def rank_key(kind: str, entry: Entry) -> tuple[float, ...]:
    """The entry's primary means, each oriented so that smaller is better: the order within a rank."""
    return tuple(-entry.estimate(m).mean if higher_is_better(m) else entry.estimate(m).mean for m in PRIMARY[kind])


def floor_excess(worse_by: float, se: float, spread: float) -> float:
    """How far a mean is worse than the floor, in units of what an exact sampler's mean may stray from it: ``worse_by``
    / sqrt(``spread``^2 + ``se``^2) (``spread``: :func:`reference.evidence.floor_spread`; ``se``: the seeds' standard
    error). Infinite where both are 0 and the mean is worse."""
    scale = math.hypot(spread, se)
    if scale == 0:
        return 0.0 if worse_by <= 0 else math.inf
    return worse_by / scale


def within_noise_floor(track: Track, entry: Entry) -> bool | None:
    """Whether ``entry``'s seeds cannot be told from an independent run of the reference's sampler, as long and as
    autocorrelated but exact: on no metric of :data:`FLOOR_METRICS` whose noise floor the reference publishes (the
    distance such a run is expected to score against the reference, :mod:`reference.evidence`) is the seeds' mean
    worse than the floor by more than ``FLOOR_CRITICAL`` x sqrt(spread^2 + se^2) (:func:`floor_excess`). The spread,
    published with the floor, holds what the seeds' own spread cannot see: the reference's realised Monte Carlo error,
    which every seed shares, and the floor's error as its estimate. None where the reference publishes a floor and its
    spread for none of those metrics, or for a single seed, which has no spread to test with."""
    verdicts = []
    for metric in FLOOR_METRICS[track.kind]:
        floor, spread = track.floor(metric), track.spread(metric)
        if floor is None or spread is None or metric not in entry.metrics:
            continue
        value = entry.estimate(metric)
        if value.se is None:
            return None
        worse_by = floor - value.mean if higher_is_better(metric) else value.mean - floor
        verdicts.append(worse_by <= ROUND_OFF * max(1.0, abs(floor))
                        or floor_excess(worse_by, value.se, spread) <= FLOOR_CRITICAL)
    return all(verdicts) if verdicts else None


def _same_means(kind: str, a: Entry, b: Entry) -> bool:
    """Whether the two entries' primary means are equal up to ``ROUND_OFF``."""
    return all(abs(x - y) <= ROUND_OFF * max(1.0, abs(x), abs(y))
               for x, y in zip(rank_key(kind, a), rank_key(kind, b)))


def rank_entries(track: Track) -> None:
    """Orders the entries by their means (:func:`rank_key`) and sets each one's :attr:`~Entry.rank` (its place;
    equal means share it, :attr:`~Entry.tied`), :attr:`~Entry.within_floor`, and what its seeds tell against the
    first entry: :attr:`~Entry.apart_from_first` (Welch's test on the first primary metric both report, every
    comparison with the first corrected together by Holm's procedure, :func:`holm_rejected`) and, where not apart,
    :attr:`~Entry.seeds_needed`."""
    kind = track.kind
    track.entries.sort(key=lambda entry: rank_key(kind, entry))
    for place, entry in enumerate(track.entries):
        entry.within_floor = within_noise_floor(track, entry)
        ahead = track.entries[place - 1] if place else None
        entry.rank = ahead.rank if ahead is not None and _same_means(kind, ahead, entry) else place + 1
    for entry in track.entries:
        entry.tied = sum(other.rank == entry.rank for other in track.entries) > 1
    first = track.entries[0]
    metric = next(m for m in PRIMARY[kind] if m in first.metrics)
    others = [entry for entry in track.entries if entry.rank > 1 and metric in entry.metrics]
    p_values = {index: welch_p(first.estimate(metric), entry.estimate(metric)) for index, entry in enumerate(others)}
    tested = {index: p for index, p in p_values.items() if p is not None}
    rejected = holm_rejected(tested, 1 - CONFIDENCE)
    for index, entry in enumerate(others):
        entry.apart_from_first = None if p_values[index] is None else index in rejected
        if entry.apart_from_first is False:  # its seeds did not tell it apart: more than it holds, whatever the plan
            planned = seeds_to_tell_apart(first.estimate(metric), entry.estimate(metric), len(tested))
            entry.seeds_needed = max(planned, len(entry.metrics[metric]) + 1)
        else:
            entry.seeds_needed = None


def primary_description(kind: str) -> str:
    return ", then ".join(f"{m} ({'higher' if higher_is_better(m) else 'lower'} is better)" for m in PRIMARY[kind])


def tracks(rows: list[RunRow]) -> list[Track]:
    """Rows grouped into tracks (by task, version, reference, budget), entries ranked (:func:`rank_entries`)."""
    grouped: dict[tuple, Track] = {}
    for row in rows:
        track_key = (row.task, row.task_version, row.reference_sha256, row.budget)
        track = grouped.setdefault(track_key, Track(row.task, row.task_version, row.task_kind,
                                                    row.reference_sha256, row.budget, row.noise_floor,
                                                    noise_floor_spread=row.noise_floor_spread))
        identity = (row.method, row.config_hash, row.label)
        entry = next((e for e in track.entries if e.identity == identity), None)
        if entry is None:
            entry = Entry(row.method, row.config_hash, row.config, row.source, label=row.label,
                          architecture_change=row.architecture_change)
            track.entries.append(entry)
        entry.add(row)
    for track in grouped.values():
        rank_entries(track)
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


@dataclass
class Standing:
    """One method configuration's places on the tasks it ran at one budget (:func:`standings`)."""

    budget: float
    places: list[tuple[Track, Entry]] = field(default_factory=list)
    """(track, the configuration's entry on it), one per task, in the tracks' order."""

    @property
    def entry(self) -> Entry:
        """Its entry on the first of its tasks: its name there is its name on every one (:func:`entry_name`)."""
        return self.places[0][1]

    @property
    def tasks(self) -> int:
        return len(self.places)

    @property
    def ranks(self) -> list[int]:
        return [entry.rank for _, entry in self.places]

    @property
    def mean_rank(self) -> float:
        return float(np.mean(self.ranks))

    @property
    def firsts(self) -> int:
        """On how many of its tasks it is in the top group (:attr:`Entry.in_top_group`)."""
        return sum(entry.in_top_group for _, entry in self.places)

    @property
    def within_floor(self) -> int:
        """On how many of its tasks it is within the reference's noise floor."""
        return sum(bool(entry.within_floor) for _, entry in self.places)

    @property
    def floors(self) -> int:
        """On how many of its tasks the reference publishes a noise floor of a metric of :data:`FLOOR_METRICS`."""
        return sum(entry.within_floor is not None for _, entry in self.places)


def standings(all_tracks: list[Track]) -> list[Standing]:
    """The summary across tasks: at each budget that two or more tasks hold, each method configuration (by the name
    the tables give it: method and label, or its shown config hash) with its rank on each of those tasks it ran.
    Ordered by budget, then mean rank, then the number of first ranks (more first), then name."""
    by_budget: dict[float, list[Track]] = {}
    for track in all_tracks:
        by_budget.setdefault(track.budget, []).append(track)
    found: list[Standing] = []
    for budget, budget_tracks in sorted(by_budget.items()):
        if len(budget_tracks) < 2:
            continue
        named: dict[tuple, Standing] = {}
        for track in budget_tracks:
            for entry in track.entries:
                key = (entry.method, entry.label, entry.config_hash if entry.hash_shown else None)
                named.setdefault(key, Standing(budget)).places.append((track, entry))
        found.extend(sorted(named.values(), key=lambda s: (s.mean_rank, -s.firsts, entry_name(s.entry))))
    return found


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
    """:func:`entry_name`, with :data:`CHANGED_NETWORK_MARK` where the entry changed the task's network and
    :data:`bench.trust.UNVERIFIED_MARK` where it was scored against a file no one verified."""
    name = entry_name(entry, quote)
    if entry.architecture_change is not None:
        name = f"{name} {CHANGED_NETWORK_MARK}"
    return f"{name} {UNVERIFIED_MARK}" if entry.unverified_files else name


def changed_network_notes(track: Track, quote: Callable[[str], str] = str) -> list[str]:
    """One footnote per entry of ``track`` that changed the task's network (``quote``: as for :func:`entry_name`)."""
    return [f"{CHANGED_NETWORK_MARK} {entry_name(e, quote)}: {quote(e.architecture_change)}; a changed "
            "network approximates another posterior than the reference's" for e in track.entries
            if e.architecture_change]
